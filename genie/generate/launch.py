"""Spec -> the exact commands that launch the generated project. Pure: nothing runs here."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from genie import compat
from genie.generate.preemption import PREEMPTION_NOTICE
from genie.i18n import Translations, translations
from genie.registry import FRAMEWORKS
from genie.spec import Spec

ENTRYPOINT = "train.py"
ELASTIC_MAX_RESTARTS = 3


@dataclass(frozen=True)
class Command:
    where: str  # which machine runs it, in words
    script: str  # the launch script call, e.g. "bash launch/multi_node.sh 1"
    argv: tuple[str, ...]  # what the script executes

    @property
    def shell(self) -> str:
        """What the script executes, as one line to paste into bash."""
        return shell_join(self.argv)


# torchrun flags are spelled with underscores: the only spelling torch 1.x knows.


def standalone(nproc: int, torchrun: Sequence[str] = ("torchrun",)) -> list[str]:
    """torchrun for ``nproc`` processes on one machine; --standalone runs a private
    rendezvous on a free port. ``torchrun`` may be spelled ``python -m torch.distributed.run``."""
    return [*torchrun, "--standalone", f"--nproc_per_node={nproc}"]


def torchrun_args(
    entrypoint: str,
    nproc_per_node: int | str,
    nodes: int | str = 1,
    *,
    master_addr: str | None = None,
    master_port: int | str | None = None,
    rdzv: str = "static",
    rdzv_id: str | None = None,
    node_rank: int | str = "$NODE_RANK",
    rdzv_conf: str | None = None,
    local_addr: str | None = None,
) -> list[str]:
    """torchrun for ``entrypoint``: --standalone on one node; on several, c10d (every node
    runs the same elastic command) or static (each node passes its own rank). Counts and
    addresses may be shell variables (``$NNODES``) that a launch script sets.

    ``local_addr``: the address this node advertises in the rendezvous (torch 2.0+), instead
    of its hostname, which the other nodes may not resolve."""
    if nodes == 1:
        return [*standalone(int(nproc_per_node)), entrypoint]
    args = ["torchrun", f"--nnodes={nodes}", f"--nproc_per_node={nproc_per_node}"]
    if local_addr is not None:
        args.append(f"--local_addr={local_addr}")
    if rdzv == "c10d":
        # c10d assigns node ranks and, with max_restarts, re-forms the group when a worker dies
        # (train.py resumes from the last checkpoint).
        args += [
            "--rdzv_backend=c10d",
            f"--rdzv_endpoint={master_addr}:{master_port}",
            f"--rdzv_id={rdzv_id}",
        ]
    else:
        args += [
            f"--node_rank={node_rank}",
            f"--master_addr={master_addr}",
            f"--master_port={master_port}",
        ]
    if rdzv_conf is not None:
        args.append(f"--rdzv_conf={rdzv_conf}")
    if rdzv == "c10d":
        args.append(f"--max_restarts={ELASTIC_MAX_RESTARTS}")
    return [*args, entrypoint]


# torchrun leaves Ctrl-C to the launch script, which passes it on to the workers (each in a
# session of its own): they checkpoint at the next optimizer step and stop.
CTRL_C_FLAG = "--signals_to_handle=SIGTERM,SIGHUP,SIGQUIT"


def relays_ctrl_c(spec: Spec) -> bool:
    """Whether the launch scripts pass Ctrl-C on to the workers, which stop at a step on
    it: where torchrun runs them and can be told to leave it alone (torch 2.10+)."""
    torchrun = FRAMEWORKS[spec.framework].torchrun
    return torchrun and compat.features(spec.torch)["torchrun_signals_to_handle"]


def script_line(spec: Spec, argv: list[str]) -> str:
    """``argv`` as a launch script runs it: with CTRL_C_FLAG where it relays Ctrl-C."""
    if relays_ctrl_c(spec) and argv[0] == "torchrun":
        argv = [argv[0], CTRL_C_FLAG, *argv[1:]]
    return shell_join(argv)


def single_node_args(spec: Spec) -> list[str]:
    """All processes on this machine."""
    if not FRAMEWORKS[spec.framework].torchrun:
        return ["python", ENTRYPOINT]  # DataParallel: one process drives every GPU
    return [*standalone(spec.processes_per_node), ENTRYPOINT]


# What the multi-node script reads from its argument or the environment (torchrun's own names
# for the address and port), falling back to the answers; see :func:`script_vars`.
NODE_RANK_VAR = "$NODE_RANK"
SCRIPT_VARS = ("MASTER_ADDR", "MASTER_PORT", "NNODES", "NPROC_PER_NODE")
# Set by the script itself: this node's own address on the route to the master (see
# launch/network.sh), the rendezvous settings, what torchrun starts (train.py, or the preflight)
LOCAL_ADDR_VAR, RDZV_CONF_VAR, ENTRYPOINT_VAR = "$LOCAL_ADDR", "$RDZV_CONF", "$ENTRYPOINT"
NETWORK_SCRIPT = "launch/network.sh"
PREFLIGHT = "launch/preflight.py"


def script_vars(spec: Spec) -> dict[str, str]:
    """The multi-node script's variables and their defaults (the answers)."""
    return {
        "MASTER_ADDR": str(spec.master_addr),
        "MASTER_PORT": str(spec.master_port),
        "NNODES": str(spec.nodes),
        "NPROC_PER_NODE": str(spec.nproc_per_node),
    }


def multi_node_args(spec: Spec, node_rank: int | None = None) -> list[str]:
    """What node ``node_rank`` runs; with None, the script's line, which reads shell variables
    (``$NODE_RANK``, ``$MASTER_ADDR``, ...) that the script sets."""
    conf: str | None
    if node_rank is None:
        v = {name: f"${name}" for name in SCRIPT_VARS}
        rank, conf, entrypoint = NODE_RANK_VAR, RDZV_CONF_VAR, ENTRYPOINT_VAR
    else:
        v, rank, entrypoint = script_vars(spec), str(node_rank), ENTRYPOINT
        # c10d: node 0 hosts the rendezvous store. torch's own guess (the endpoint matches
        # this machine's hostname) fails where the hostname maps to 127.0.1.1.
        conf = f"is_host={int(node_rank == 0)}" if spec.rdzv == "c10d" else None
    return torchrun_args(
        entrypoint,
        v["NPROC_PER_NODE"],
        v["NNODES"],
        master_addr=v["MASTER_ADDR"],
        master_port=v["MASTER_PORT"],
        rdzv=spec.rdzv or "static",
        rdzv_id=spec.name,
        node_rank=rank,
        rdzv_conf=conf,
        local_addr=LOCAL_ADDR_VAR if passes_local_addr(spec) else None,
    )


def passes_local_addr(spec: Spec) -> bool:
    """Whether the launch scripts pass each node's own address to torchrun (torch 2.0+)."""
    return compat.features(spec.torch)["local_addr"]


def needs_network_script(spec: Spec) -> bool:
    """launch/network.sh: every node finds its own address and interface (multi-node, and
    SLURM jobs that run torchrun per node)."""
    return spec.multi_node_script or (spec.scheduler == "slurm" and not slurm_uses_srun_tasks(spec))


_SHELL_SAFE = re.compile(r"^[A-Za-z0-9_.:/=$,-]*$")
_VARIABLE = re.compile(r"^\$[A-Za-z_][A-Za-z0-9_]*$")


def shell_join(argv: Sequence[str]) -> str:
    """Quote for bash, leaving ``$VARIABLE`` references (alone or in values) expandable."""
    parts = []
    for arg in argv:
        flag, eq, value = arg.partition("=")
        if _VARIABLE.match(arg):
            parts.append(f'"{arg}"')
        elif eq and "$" in value:
            if not _SHELL_SAFE.match(value):
                raise ValueError(f"cannot quote {arg!r} for the launch script")
            parts.append(f'{flag}="{value}"')
        else:
            parts.append(shlex.quote(arg))
    return " ".join(parts)


SLURM_SCRIPT = "launch/slurm.sbatch"
SLURM_LOGS = "logs"
SLURM_HEAD_VAR = "$head_node"  # the script sets it from scontrol show hostnames
SLURM_PORT_VAR = "$rdzv_port"  # the script derives it from the job id
CPUS_PER_GPU = 4  # 3 DataLoader workers and the training process: most GPU nodes have them
SLURM_PORT_BASE = 20000  # + job id % 10000: jobs sharing a node do not collide
K8S_MANIFESTS = ("launch/pytorchjob.yaml", "launch/trainjob.yaml")
K8S_VOLUME = "launch/volume.yaml"


def slurm_uses_srun_tasks(spec: Spec) -> bool:
    """One SLURM task per process, started by srun itself, where the framework asks for it
    (Lightning) or runs without torchrun (DataParallel); the others run torchrun per node."""
    framework = FRAMEWORKS[spec.framework]
    return framework.srun_tasks or not framework.torchrun


def cpus_per_process(spec: Spec) -> int:
    """CPUs each training process is given (SLURM's --cpus-per-task, the pods' requests):
    CPUS_PER_GPU for each GPU it drives, one on CPU-only nodes. config.default_workers()
    in the project sizes its DataLoader workers from them."""
    if not spec.gpus_per_node:
        return 1
    return CPUS_PER_GPU * max(1, spec.gpus_per_node // spec.processes_per_node)


def cpus_per_node(spec: Spec) -> int:
    return cpus_per_process(spec) * spec.processes_per_node


def sbatch_directives(spec: Spec) -> list[str]:
    """The ``#SBATCH`` options of launch/slurm.sbatch, in order (pure)."""
    per_node = spec.processes_per_node
    tasks, cpus = (per_node, cpus_per_process(spec)) if slurm_uses_srun_tasks(spec) else (
        1, cpus_per_node(spec))  # fmt: skip
    lines = [f"--job-name={spec.name}", f"--nodes={spec.nodes}", f"--ntasks-per-node={tasks}"]
    if spec.gpus_per_node:
        lines.append(f"--gpus-per-node={spec.gpus_per_node}")
    lines += [f"--cpus-per-task={cpus}", f"--output={SLURM_LOGS}/%x-%j.out"]
    # Preemption: SLURM signals the batch script (B:) PREEMPTION_NOTICE s before the time limit;
    # it stops the step, whose ranks checkpoint at an agreed step, and requeues the job.
    lines += [f"--signal=B:USR1@{PREEMPTION_NOTICE}", "--requeue", "--open-mode=append"]
    for name in ("partition", "account", "time"):
        value = getattr(spec, name)
        if value:
            lines.append(f"--{name}={value}")
    return lines


def slurm_args(spec: Spec) -> list[str]:
    """What the batch script runs on the allocation (its last line)."""
    # --kill-on-bad-exit: a task that fails ends the step, not a hang of the others until
    # the collective timeout or the wall time
    if slurm_uses_srun_tasks(spec):
        return ["srun", "--kill-on-bad-exit=1", "python", ENTRYPOINT]
    # On every node, launch/network.sh finds the node's own address and interface, then runs
    # torchrun with them.
    return [
        "srun", "--kill-on-bad-exit=1", "bash", NETWORK_SCRIPT, SLURM_HEAD_VAR,
        "torchrun", "--nnodes=$SLURM_NNODES",
        f"--nproc_per_node={spec.processes_per_node}", "--rdzv_backend=c10d",
        f"--rdzv_endpoint={SLURM_HEAD_VAR}:{SLURM_PORT_VAR}", "--rdzv_id=$SLURM_JOB_ID",
        ENTRYPOINT,
    ]  # fmt: skip


# The batch script's first step: the data, prepared by one process (train.py --prepare-only)
PREPARE_STEP = ("srun", "--nodes=1", "--ntasks=1", "python", ENTRYPOINT, "--prepare-only")


def sbatch_args(extra: Sequence[str] = (), wait: bool = False) -> list[str]:
    """The submission: ``--wait`` (the smoke test) returns when the job ends, with its code."""
    return ["sbatch", *(["--wait", "--parsable"] if wait else []), SLURM_SCRIPT, *extra]


def commands(spec: Spec, tr: Translations | None = None) -> list[Command]:
    """One command per node, in node-rank order; with SLURM, the submission comes first.
    ``where`` is in genie's language, or ``tr``'s (a README's)."""
    tr = translations() if tr is None else tr
    gettext, ngettext = tr.gettext, tr.ngettext
    result = []
    if spec.scheduler == "slurm":
        submit = f"mkdir -p {SLURM_LOGS} && " + shlex.join(sbatch_args())
        where = ngettext(
            "the SLURM login node (runs on {n} allocated node)",
            "the SLURM login node (runs on {n} allocated nodes)",
            spec.nodes,
        ).format(n=spec.nodes)
        result.append(Command(where, submit, tuple(slurm_args(spec))))
    if spec.scheduler == "kubernetes":
        where = gettext("your Kubernetes cluster (Kubeflow)")
        build = f"docker build -t {spec.image} . && docker push {spec.image}"
        result.append(Command(gettext("this machine (the image)"), build, ()))
        result.append(Command(where, f"kubectl apply -f {K8S_VOLUME}", ()))
        for manifest in K8S_MANIFESTS:
            result.append(Command(where, f"kubectl apply -f {manifest}", ("torchrun", ENTRYPOINT)))
        if spec.multi_node:  # the operator starts the nodes
            return result
    if not spec.multi_node:
        return [
            *result,
            Command(
                gettext("this machine"), "bash launch/single_node.sh", tuple(single_node_args(spec))
            ),
        ]
    for rank in range(spec.nodes):
        where = gettext("node {rank}").format(rank=rank)
        where += f" ({spec.master_addr})" if rank == 0 else ""
        argv = tuple(multi_node_args(spec, rank))
        result.append(Command(where, f"bash launch/multi_node.sh {rank}", argv))
    return result
