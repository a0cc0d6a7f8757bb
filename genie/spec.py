"""The project spec: the field table, the cross-field rules, and the frozen :class:`Spec`.

Answers arrive as one raw mapping (flags over answers file over wizard); :func:`build_spec`
turns it into a :class:`Spec`. The wizard and the CLI flags are generated from
:data:`FIELDS`, and both go through :meth:`Field.parse`, so a value is judged the same way
whichever way it came in.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Callable

from genie import compat, contract
from genie.detect import Machine
from genie.errors import GenieError, SpecError
from genie.fields import Answers, Field
from genie.i18n import _
from genie.registry import FRAMEWORKS, STRATEGIES, TASKS

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_HOST_LABEL_RE = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def _multi_node(answers: Answers) -> bool:
    return int(answers.get("nodes") or 1) > 1


# ---------------------------------------------------------------- field checks


def _check_name(value: str) -> str | None:
    if _NAME_RE.match(value) and ".." not in value:
        return None
    return _(
        "letters, digits, '-', '_' and '.', starting with a letter or digit, "
        "at most 64 characters (no '/' or '..')"
    )


def _check_master_addr(value: str) -> str | None:
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        ip = None
    if ip is not None:
        if ip.is_loopback or ip.is_unspecified:
            return _(
                "other nodes cannot reach a loopback address; use this node's IP or hostname "
                "as the other nodes see it"
            )
        return None
    labels = value.rstrip(".").split(".")
    if not value or len(value) > 253 or not all(_HOST_LABEL_RE.match(x) for x in labels):
        return _("a hostname or IP address that every node can reach")
    if value.lower() in _LOOPBACK_NAMES:
        return _(
            "other nodes cannot reach localhost; use this node's IP or hostname "
            "as the other nodes see it"
        )
    return None


# A version as users write it: major.minor, or major.minor.patch (2.14, 2.14.1); nothing else
_VERSION_RE = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?")


def _normalize_minor(text: str) -> str:
    """``2.14.1`` -> ``2.14``; anything not a version is left as it is, for the check to refuse."""
    if not _VERSION_RE.fullmatch(text):
        return text
    return compat.format_minor(compat.parse_minor(text))


def _check_python(value: str) -> str | None:
    if not _VERSION_RE.fullmatch(value):
        return _("a Python version such as 3.11")
    version = compat.parse_minor(value)
    if not (3, 7) <= version <= (3, 15):
        return _("a Python version from 3.7 to 3.15")
    return None


# ---------------------------------------------------------------- defaults


def _default_torch(answers: Answers, machine: Machine) -> str:
    if machine.torch:
        installed = _normalize_minor(machine.torch.split("+")[0])
        if installed in compat.SUPPORTED:
            return installed
    return compat.NEWEST


def _default_nproc(answers: Answers, machine: Machine) -> int:
    return int(answers.get("gpus_per_node") or 0) or contract.CPU_PROCESSES


def _default_precision(answers: Answers, machine: Machine) -> str:
    return "bf16" if answers.get("gpus_per_node") else "fp32"


def _const(value: Any) -> Callable[[Answers, Machine], Any]:
    return lambda answers, machine: value


# ---------------------------------------------------------------- the fields

TASK_CHOICES = {key: task.summary for key, task in TASKS.items()}
FRAMEWORK_CHOICES = {key: f.summary for key, f in FRAMEWORKS.items()}
TORCH_CHOICES = {minor: _("not verified by genie yet") for minor in compat.UNVERIFIED}
TORCH_MARKS = {minor: _("unverified") for minor in compat.UNVERIFIED}


_DP_ONE_PROCESS = _("does not apply to --framework dp, which runs one process")


def _torchrun(answers: Answers) -> bool:
    return FRAMEWORKS[str(answers.get("framework"))].torchrun


FIELDS: tuple[Field, ...] = (
    Field(
        "name", str, _("Project name"),
        _("Used for the README title and the rendezvous id; defaults to the directory name."),
        default=_const(None), check=_check_name,
    ),
    Field(
        "nodes", int, _("How many nodes (machines)?"),
        _("Each node runs one torchrun; 1 keeps everything on this machine."),
        default=_const(1), minimum=1, maximum=4096,
    ),
    Field(
        "master_addr", str, _("Master address (node 0's hostname or IP)?"),
        _("Every node connects here to find the others; it must be reachable from all nodes."),
        default=lambda answers, machine: machine.hostname, check=_check_master_addr,
        applies=_multi_node,
    ),
    Field(
        "master_port", int, _("Master port?"),
        _("A free TCP port on the master node, open to the other nodes."),
        default=_const(29500), minimum=1024, maximum=65535, applies=_multi_node,
    ),
    Field(
        "rdzv", str, _("Rendezvous backend?"),
        _("c10d rendezvous survives a node restart; static needs fixed node ranks."),
        default=_const("c10d"), choices=("c10d", "static"), applies=_multi_node,
    ),
    Field(
        "gpus_per_node", int, _("GPUs per node?"),
        _("0 trains on CPU with the gloo backend; GPUs use NCCL, one process per GPU."),
        default=lambda answers, machine: machine.gpus, minimum=0, maximum=64,
    ),
    Field(
        "torch", str, _("PyTorch version?"),
        _("The version your cluster runs; the generated code uses only its APIs."),
        default=_default_torch, choices=compat.SUPPORTED, normalize=_normalize_minor,
        choice_help=TORCH_CHOICES, marks=TORCH_MARKS,
    ),
    Field(
        "python", str, _("Python version on the cluster?"),
        _("Decides which torch versions and features can work; defaults to this Python."),
        default=lambda answers, machine: machine.python, check=_check_python,
        normalize=_normalize_minor,
    ),
    Field(
        "task", str, _("Task?"),
        _("The model and data; every framework shares the same task code."),
        default=_const("custom"), choices=tuple(TASKS), choice_help=TASK_CHOICES,
    ),
    Field(
        "framework", str, _("Framework?"),
        _("Who runs the training loop; all of them launch with torchrun except dp."),
        default=_const("ddp"), choices=tuple(FRAMEWORKS), choice_help=FRAMEWORK_CHOICES,
        warnings={k: f.warning for k, f in FRAMEWORKS.items() if f.warning},
    ),
    Field(
        "strategy", str, _("Parallel strategy?"),
        _("ddp keeps a full model copy per process; fsdp shards it, for models too big for one."),
        default=_const("ddp"), choices=tuple(STRATEGIES), choice_help=STRATEGIES,
        applies=_torchrun, not_applicable=_DP_ONE_PROCESS,
    ),
    Field(
        "nproc_per_node", int, _("Processes per node?"),
        _("One process per GPU is the rule; defaults to the GPU count, or 2 on CPU."),
        default=_default_nproc, minimum=1, maximum=256, applies=_torchrun,
        not_applicable=_DP_ONE_PROCESS,
    ),
    Field(
        "precision", str, _("Precision?"),
        _("bf16 needs no loss scaling; fp16 needs a GPU and a GradScaler; fp32 is the baseline."),
        default=_default_precision, choices=("bf16", "fp16", "fp32"),
    ),
    Field(
        "batch_size", int, _("Batch size per process?"),
        _("Global batch = batch size x processes x accumulation steps."),
        default=_const(32), minimum=1, maximum=1_000_000,
    ),
    Field(
        "grad_accum", int, _("Gradient accumulation steps?"),
        _("Gradients are all-reduced only on the last micro-step (no_sync on the others)."),
        default=_const(1), minimum=1, maximum=10_000,
    ),
    Field(
        "epochs", int, _("Epochs?"), _("Passes over the training data."),
        default=_const(3), minimum=1, maximum=1_000_000,
    ),
    Field(
        "lr", float, _("Learning rate?"), _("AdamW learning rate."),
        default=_const(1e-3), minimum=1e-12, maximum=10,
    ),
    Field(
        "compile", bool, _("Use torch.compile?"),
        _("Compiles the model for speed (torch 2.0+); the first steps are slower."),
        default=_const(False),
    ),
    Field(
        "tracker", str, _("Experiment tracker?"),
        _("Where rank 0 logs loss, accuracy, learning rate, throughput; TensorBoard is offline."),
        default=_const("tensorboard"), choices=tuple(compat.TRACKER_PACKAGES),
    ),
    Field(
        "seed", int, _("Random seed?"),
        _("Seeds Python and torch; every rank starts from the same weights."),
        default=_const(42), minimum=0, maximum=2**32 - 1,
    ),
)  # fmt: skip

FIELD_BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}
# Keys an answers file may carry besides the fields (written by genie itself).
META_KEYS = ("genie_version", "files")


@dataclass(frozen=True)
class Spec:
    """A validated project description. Fields not applicable are None."""

    name: str
    nodes: int
    master_addr: str | None
    master_port: int | None
    rdzv: str | None
    gpus_per_node: int
    torch: str
    python: str
    task: str
    framework: str
    strategy: str | None  # None for DataParallel
    nproc_per_node: int | None  # None for DataParallel: one process
    precision: str
    batch_size: int
    grad_accum: int
    epochs: int
    lr: float
    compile: bool
    tracker: str
    seed: int

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    @property
    def processes_per_node(self) -> int:
        return self.nproc_per_node or 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.processes_per_node

    def warnings(self) -> list[str]:
        """What the user should know about the choices made (e.g. DataParallel is slow)."""
        answers = self.answers()
        return [
            f.warnings[answers[f.name]]
            for f in FIELDS
            if f.warnings and answers.get(f.name) in f.warnings
        ]

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size * self.grad_accum

    def answers(self) -> dict[str, Any]:
        """The applicable answers, in declaration order (what the answers file holds)."""
        return {k: v for k, v in asdict(self).items() if v is not None}


# The wizard's hook: given a field, its default and the answers so far, return the
# user's (parsed) answer.
Ask = Callable[[Field, Any, Answers], Any]


def resolve(raw: Answers, machine: Machine, ask: Ask | None = None) -> dict[str, Any]:
    """Fill every applicable field from ``raw``, else from ``ask`` (the wizard), else its
    default, validating each one. Fields are visited in declaration order, so whether a
    field applies and what its default is can depend on the answers before it.

    Returns the values in declaration order; fields that do not apply are None."""
    unknown = sorted(set(raw) - set(FIELD_BY_NAME) - set(META_KEYS))
    if unknown:
        raise GenieError(
            _("unknown answer {keys}; known answers: {known}").format(
                keys=", ".join(repr(k) for k in unknown), known=", ".join(FIELD_BY_NAME)
            )
        )
    values: dict[str, Any] = {}
    for f in FIELDS:
        given = raw.get(f.name)
        if not f.applies(values):
            if given is not None:
                raise SpecError(f.label, given, f.not_applicable)
            values[f.name] = None
        elif given is not None:
            values[f.name] = f.parse(given)
        elif ask is not None:
            values[f.name] = ask(f, default(f, values, machine), values)
        else:
            values[f.name] = default(f, values, machine)
    return values


def default(field: Field, answers: Answers, machine: Machine) -> Any:
    """``field``'s default given the answers so far, held to the same rules as an answer:
    when the plain default breaks one, the first value that does not (or, for Python, the
    nearest version the chosen torch supports)."""
    value = field.default(answers, machine)
    if value is None or problem_with(field, value, answers) is None:
        return value
    if field.name == "python" and answers.get("torch"):
        release = compat.release(str(answers["torch"]))
        py = compat.parse_minor(str(value))
        nearest = min(max(py, release.python_min), release.python_max)
        return compat.format_minor(nearest)
    options = allowed(field, answers)
    return options[0] if options else value


# ---------------------------------------------------------------- cross-field rules


@dataclass(frozen=True)
class Rule:
    """One rule that involves several answers. ``problem`` reads only the answers named in
    ``needs`` and returns what is wrong, or None. ``blames`` is the answer that gets re-asked.

    The same rules make the final check (:func:`_cross_check`), filter the wizard's choices
    (:func:`allowed`) and judge defaults (:func:`resolve`): they are written once."""

    blames: str
    needs: tuple[str, ...]
    problem: Callable[[Answers], str | None]

    def ready(self, answers: Answers) -> bool:
        return all(k in answers for k in self.needs)


def _dp_one_node(v: Answers) -> str | None:
    if not FRAMEWORKS[v["framework"]].multi_node and int(v["nodes"]) > 1:
        return _(
            "DataParallel runs in one process on one node; use --framework ddp for --nodes > 1"
        )
    return None


def _one_process_per_gpu(v: Answers) -> str | None:
    gpus, nproc = v["gpus_per_node"], v["nproc_per_node"]
    if gpus and nproc and nproc > gpus:
        return _("at most one process per GPU: {n} or fewer").format(n=gpus)
    return None


def _fp16_needs_gpus(v: Answers) -> str | None:
    if v["precision"] == "fp16" and not v["gpus_per_node"]:
        return _("fp16 mixed precision needs CUDA GPUs; use bf16 or fp32 on CPU")
    return None


def _fsdp_here(v: Answers) -> str | None:
    if v["strategy"] != "fsdp":
        return None
    if compat.parse_minor(v["torch"]) < compat.FEATURES["fsdp"]:
        return compat.fsdp_problem(v["torch"], "fp32")
    needs_gpus = compat.fsdp_needs_gpus(v["framework"], v["torch"])
    if not v["gpus_per_node"] and needs_gpus:
        return needs_gpus + _(
            "; set --gpus-per-node, or use --framework ddp with torch {v} for FSDP on CPU"
        ).format(v=compat.format_minor(compat.FSDP_CPU_FROM))
    return None


def _fsdp_precision(v: Answers) -> str | None:
    if v["strategy"] != "fsdp":
        return None
    return compat.fsdp_problem(v["torch"], v["precision"])


def _torch_on_python(v: Answers) -> str | None:
    return compat.python_problem(v["torch"], v["python"])


def _compile_here(v: Answers) -> str | None:
    if not v["compile"]:
        return None
    problem = compat.compile_problem(v["torch"], v["python"])
    return problem + _("; use --no-compile") if problem else None


def _libraries_exist(v: Answers) -> str | None:
    try:
        compat.requirements(v["torch"], v["python"], v["framework"], v["task"])
    except LookupError as err:
        return str(err)
    return None


# In the order the final check reports them.
RULES: tuple[Rule, ...] = (
    Rule("framework", ("framework", "nodes"), _dp_one_node),
    Rule("nproc_per_node", ("gpus_per_node", "nproc_per_node"), _one_process_per_gpu),
    Rule("precision", ("precision", "gpus_per_node"), _fp16_needs_gpus),
    Rule("strategy", ("strategy", "torch", "framework", "gpus_per_node"), _fsdp_here),
    Rule("strategy", ("strategy", "torch", "precision"), _fsdp_precision),
    Rule("torch", ("torch", "python"), _torch_on_python),
    Rule("compile", ("compile", "torch", "python"), _compile_here),
    Rule("framework", ("torch", "python", "framework", "task"), _libraries_exist),
)


def problems(answers: Answers, only: str | None = None) -> list[tuple[Rule, str]]:
    """Every rule that the answers so far break (rules whose answers are not all in yet
    are skipped); with ``only``, just the rules that read that answer."""
    found = []
    for rule in RULES:
        if only is not None and only not in rule.needs:
            continue
        if rule.ready(answers):
            problem = rule.problem(answers)
            if problem:
                found.append((rule, problem))
    return found


def problem_with(field: Field, value: Any, answers: Answers) -> str | None:
    """What a rule says against answering ``field`` with ``value``, given the answers so
    far; None when nothing does (what the wizard validates a reply with)."""
    found = problems({**answers, field.name: value}, only=field.name)
    return found[0][1] if found else None


def allowed(field: Field, answers: Answers) -> tuple[Any, ...]:
    """The choices (or, for a yes/no answer, the values) of ``field`` that no rule rejects
    given the answers so far: what the wizard offers."""
    options: tuple[Any, ...] = (True, False) if field.kind is bool else field.choices or ()
    return tuple(c for c in options if problem_with(field, c, answers) is None)


def _cross_check(v: Mapping[str, Any]) -> None:
    """Rules that involve several answers; they run once, after every answer is in."""
    found = problems(v)
    if found:
        rule, problem = found[0]
        raise SpecError(FIELD_BY_NAME[rule.blames].label, v[rule.blames], problem)


def build_spec(raw: Answers, machine: Machine, ask: Ask | None = None) -> Spec:
    """The one way to get a :class:`Spec`: resolve defaults, validate fields, then cross-check."""
    return finish(resolve(raw, machine, ask))


def finish(values: dict[str, Any]) -> Spec:
    """Resolved values to a :class:`Spec`, after the rules that involve several answers."""
    if values["name"] is None:
        raise SpecError(FIELD_BY_NAME["name"].label, None, _("a project name is required"))
    _cross_check(values)
    return Spec(**values)
