"""Multi-node on separate hosts: network namespaces with their own hostnames, addresses and
/etc/hosts (the others' names do not resolve), each node started from its own copy of the
project exactly as its README says. The misconfigurations clusters have, each named in one
line within 30 s by the preflight; a node lost for real; genie explain on the logs of torch
alone."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from genie.smoke import hosts
from genie.smoke import nodes as smoke_nodes
from genie.smoke.plan import RunOptions
from genie.smoke.signatures import SIGNATURES
from genie.smoke.torchrun_output import strip_prefixes
from genie.spec import build_spec

from ..conftest import run_genie
from .conftest import WAITING_GROUP, count_preparations, generate
from .hosts import MASTER, PORT, Node, copies, cut, need_hosts, report_line, run_nodes

pytestmark = [pytest.mark.e2e, WAITING_GROUP]
PREFLIGHT = "GENIE_PREFLIGHT "
# Seconds: a node that never arrives is named after PREFLIGHT_WAIT (27 by default), plus the
# time two Python processes take to import torch on a loaded machine.
DEFAULT_WAIT, QUICK_WAIT, MARGIN = 27, 10, 12


@pytest.fixture(scope="session")
def projects(tmp_path_factory):
    need_hosts()
    root = tmp_path_factory.mktemp("hosts")
    flags = ("--framework", "ddp", "--nodes", "2", "--gpus-per-node", "0", "--nproc-per-node",
             "1", "--master-addr", MASTER, "--master-port", PORT, "--scheduler", "none")  # fmt: skip
    return {
        rdzv: generate(root, *flags, "--rdzv", rdzv, name=f"ddp-{rdzv}")
        for rdzv in ("c10d", "static")
    }


def two(**node1) -> list[Node]:
    return [Node(hosts.HostConfig("node0")), Node(hosts.HostConfig("node1", **node1))]


def verdict(output: str) -> dict:
    line = report_line(output, PREFLIGHT)
    assert line is not None, output[-3000:]
    return json.loads(line.split(PREFLIGHT, 1)[1])


# ---------------------------------------------------------------- cases that work


WORKING = {  # how node 1 is set up; (the default: hostnames that do not resolve)
    "a-hostnames-do-not-resolve": {},
    "b-hostname-is-127.0.1.1": {"own_name": "127.0.1.1"},
    # a decoy first, and the link not called eth0: one run for both (each alone, too, must
    # leave the address on the route to the master)
    "c-decoy-interface-first-and-the-link-named-ens5": {"decoy": True, "interface": "ens5"},
}
LATE = 15  # case a: node 0 starts this many seconds after node 1


@pytest.mark.parametrize("case", list(WORKING))
def test_a_case_that_should_work_passes_the_preflight(projects, tmp_path, case):
    """Case a also starts node 0 (the master) 15 s after node 1: node 0 then needs seconds of
    its own to listen (torch's import); at 20 s, a loaded 2-core CI machine once took the
    other 7 s of the 27 s wait."""
    dirs = copies(projects["c10d"], tmp_path, 2)
    nodes = two(**WORKING[case])
    if case.startswith("a-"):
        nodes[0] = Node(hosts.HostConfig("node0"), start_after=LATE)
    runs = run_nodes(dirs, nodes, ["--preflight"], timeout=150)
    assert [r.returncode for r in runs] == [0, 0], runs[0].output[-3000:] + runs[1].output[-3000:]
    found = verdict(runs[0].output)
    assert found["ok"] and found["world"] == 2 and found["gbps"] > 0
    # node 1 found its own address and interface on the route to the master
    interface = WORKING[case].get("interface", "eth0")
    assert f"from {hosts.SUBNET}.2 on {interface}" in runs[1].output


def test_node_1_started_15_seconds_before_node_0_trains(projects, tmp_path):
    """The same lateness as case a's preflight, through the training's own rendezvous."""
    dirs = copies(projects["c10d"], tmp_path, 2)
    late = [Node(hosts.HostConfig("node0"), start_after=LATE), Node(hosts.HostConfig("node1"))]
    runs = run_nodes(dirs, late, ["--smoke"], timeout=150)
    assert [r.returncode for r in runs] == [0, 0], runs[1].output[-3000:]
    assert "GENIE_SMOKE" in runs[0].output + runs[1].output


# ---------------------------------------------------------------- cases named in one line


def failing(projects, tmp_path, nodes, rdzv="c10d", edit=None, wait=QUICK_WAIT):
    """Run the preflight; every node that started fails, within ``wait`` and the margin a
    loaded machine needs (torch's import, two of them)."""
    dirs = copies(projects[rdzv], tmp_path, 2)
    if edit:
        edit(dirs)
    temp = tmp_path / "tmp"
    temp.mkdir()
    for node in nodes:
        node.env.setdefault("PREFLIGHT_WAIT", str(wait))
        node.env.setdefault("TMPDIR", str(temp))
    runs = run_nodes(dirs, nodes, ["--preflight"], timeout=90)
    started = [r for r in runs if r.returncode is not None]
    assert started and all(r.returncode not in (0, None) for r in started), [r.output for r in runs]
    assert max(r.seconds for r in started) < wait + MARGIN
    # node 0's facts file is for the torchrun stage a failed preflight never reaches
    assert not list(temp.glob("preflight-*"))
    return runs


def fail_lines(run) -> list[str]:
    return [line for line in run.output.splitlines() if line.startswith("preflight FAIL:")]


def test_a_firewall_dropping_the_master_port_is_named(projects, tmp_path):
    nodes = [
        Node(hosts.HostConfig("node0", drop_tcp_port=int(PORT))),
        Node(hosts.HostConfig("node1")),
    ]
    runs = failing(projects, tmp_path, nodes, wait=DEFAULT_WAIT)  # the default, within 30 s
    assert max(r.seconds for r in runs) < 30
    [line] = fail_lines(runs[1])
    assert "cannot reach node 0" in line and "firewall" in line
    assert "node 1 never arrived" in " ".join(fail_lines(runs[0]))


def test_a_wrong_master_address_on_node_1_is_named(projects, tmp_path):
    nodes = [Node(hosts.HostConfig("node0")),
             Node(hosts.HostConfig("node1"), env={"MASTER_ADDR": f"{hosts.SUBNET}.9"})]  # fmt: skip
    runs = failing(projects, tmp_path, nodes)
    [line] = fail_lines(runs[1])
    assert f"{hosts.SUBNET}.9:{PORT}" in line and "MASTER_ADDR" in line


@pytest.mark.parametrize("rdzv", ["c10d", "static"])
def test_node_0_never_started_is_named(projects, tmp_path, rdzv):
    nodes = [Node(hosts.HostConfig("node0"), started=False), Node(hosts.HostConfig("node1"))]
    runs = failing(projects, tmp_path, nodes, rdzv)
    [line] = fail_lines(runs[1])
    assert "nothing listens there: start node 0" in line


def test_another_numpy_on_one_node_is_named(projects, tmp_path):
    # a second environment on node 1: this one's packages, but numpy's metadata says 1.26.4
    other = tmp_path / "site"
    info = other / "numpy-1.26.4.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 1.26.4\n")
    nodes = [Node(hosts.HostConfig("node0")),
             Node(hosts.HostConfig("node1"), env={"PYTHONPATH": str(other)})]  # fmt: skip
    runs = failing(projects, tmp_path, nodes)
    line = " ".join(fail_lines(runs[0]))
    assert "numpy differs (node 0 " in line and "node 1 1.26.4" in line


def test_a_different_train_py_on_one_node_is_named(projects, tmp_path):
    def edit(dirs):
        train = dirs[1] / "train.py"
        train.write_text(train.read_text() + "\n# edited on node 1 only\n")

    runs = failing(projects, tmp_path, two(), edit=edit)
    assert any(line.startswith("preflight FAIL: train.py differs") for line in fail_lines(runs[0]))


def test_nnodes_that_differ_on_one_node_are_named(projects, tmp_path):
    nodes = [Node(hosts.HostConfig("node0")), Node(hosts.HostConfig("node1"), env={"NNODES": "3"})]
    runs = failing(projects, tmp_path, nodes)
    assert any("nnodes differs (node 0 2, node 1 3)" in line for line in fail_lines(runs[0]))


def test_genie_smoke_names_a_firewall_within_30_s(projects):
    spec = build_spec({"name": "p", "nodes": 2, "master_addr": MASTER, "gpus_per_node": 0},
                      hosts_machine())  # fmt: skip
    configs = [hosts.HostConfig("node0", drop_tcp_port=29500), hosts.HostConfig("node1")]
    started = time.monotonic()
    options = RunOptions(hosts_machine(), timeout=120)
    result = smoke_nodes.run(spec, projects["c10d"], options, hosts=configs)
    assert time.monotonic() - started < DEFAULT_WAIT + MARGIN
    assert not result.passed
    assert any("preflight: node 1 cannot reach node 0" in p for p in result.problems)


def hosts_machine():
    from genie import detect

    return detect.machine()


# ---------------------------------------------------------------- checkpoints on per-node disks


def newest(dirs: list[Path], name: str) -> Path:
    """The last.pt with the most steps, whichever node holds it."""
    found = [d / name / "last.pt" for d in dirs if (d / name / "last.pt").exists()]
    return max(found, key=lambda p: torch.load(p, map_location="cpu", weights_only=True)["step"])


def weights(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key


def test_a_resume_finds_the_newest_checkpoint_on_whichever_node_has_it(projects, tmp_path):
    """Static: rank 0 runs on node 0. A run stopped in its second epoch has its checkpoint
    moved to node 1's disk (as when rank 0 ran there, which c10d can do); resumed, node 1
    sends it, and the run ends with the weights of an uninterrupted one."""
    dirs = copies(projects["static"], tmp_path, 2)
    for copy in dirs:
        count_preparations(copy)
    args = ["--smoke", "--epochs", "2"]
    stopped = [Node(n.config, env={"GENIE_FAULT": "hang:*:10"}) for n in two()]
    run_nodes(dirs, stopped, [*args, "--checkpoint-dir", "ck"], until="GENIE_FAULT hang")
    assert [p.name for p in (dirs[1] / "ck").iterdir()] == ["RUN.json"]  # node 1's own mark
    shutil.rmtree(dirs[1] / "ck")
    (dirs[0] / "ck").rename(dirs[1] / "ck")
    resumed = run_nodes(dirs, two(), [*args, "--resume", "--checkpoint-dir", "ck"])
    assert [r.returncode for r in resumed] == [0, 0], resumed[0].output[-3000:]
    assert "resuming from step 9 of ck/last.pt: sent by rank 1" in resumed[0].output
    straight = run_nodes(dirs, two(), [*args, "--checkpoint-dir", "straight"])
    assert [r.returncode for r in straight] == [0, 0]
    assert_same_weights(newest(dirs, "ck"), newest(dirs, "straight"))
    # per-node disks: each node's first process prepared its own copy, in each of the 3 runs
    assert "data: ck/ is per node: each node's first process prepares it" in resumed[0].output
    assert [(d / "prepared.txt").read_text().split() for d in dirs] == [["0"] * 3, ["1"] * 3]


def test_a_node_lost_for_real_rejoins_and_training_ends_as_if_uninterrupted(projects, tmp_path):
    """c10d, per-node disks: every process of node 1 is SIGKILLed mid-epoch, then node 1 is
    started again; torchrun on node 0 re-forms the group and training resumes from the last
    checkpoint, wherever it was written."""
    dirs = copies(projects["c10d"], tmp_path, 2)
    args = ["--smoke", "--epochs", "3", "--eval-every", "3"]
    straight = run_nodes(dirs, two(), [*args, "--checkpoint-dir", "straight"])
    assert [r.returncode for r in straight] == [0, 0], straight[1].output[-3000:]
    assert not any("rejoin" in r.output for r in straight)  # it lost no node
    configs = [hosts.HostConfig("node0"), hosts.HostConfig("node1")]
    with hosts.network(configs) as net:
        procs = lost_and_back(net, dirs, [*args, "--checkpoint-dir", "run"])
    outputs = [p.read_text() for p in procs]
    assert "resuming from step 9" in "".join(outputs), outputs[0][-3000:]
    # node 0 said whom it lost and how long torchrun waits for it to rejoin
    lost = r"launch: lost the process at 10\.77\.0\.2 .*\(restart 1 of 3\) and waits up to 600 s"
    assert re.search(lost, outputs[0]), outputs[0][-3000:]
    # ... and, while torchrun waited for node 1 (started again 12 s later), how long
    waited = "launch: waiting for every node to rejoin (restart 1 of 3): 10 s of up to 600 s"
    assert waited in outputs[0], outputs[0][-3000:]
    # node 1 started again found node 0's job, not a meet, and joined it
    assert "meet: node 0 runs the job already: joining it" in outputs[1], outputs[1][-3000:]
    assert_same_weights(newest(dirs, "run"), newest(dirs, "straight"))


def lost_and_back(net, dirs: list[Path], args: list[str]) -> list[Path]:
    """Start both nodes, node 1 to hang at its 10th step (in epoch 2); kill node 1 whole once
    it hangs; start it again 12 s later; wait for both. Returns the nodes' log files."""
    from .hosts import HOST_ENV

    env = {**os.environ, **HOST_ENV, "MASTER_ADDR": MASTER, "MASTER_PORT": PORT}
    logs = [tmp / "out.log" for tmp in dirs]

    def start(k: int, extra: dict) -> subprocess.Popen:
        with open(logs[k], "a") as log:
            argv = net.hosts[k].command(["bash", "launch/multi_node.sh", str(k), *args])
            return subprocess.Popen(argv, cwd=dirs[k], env={**env, **extra}, stdout=log,
                                    stderr=subprocess.STDOUT)  # fmt: skip

    node0 = start(0, {})
    start(1, {"GENIE_FAULT": "hang:*:10"})
    deadline = time.monotonic() + 120
    while "GENIE_FAULT hang" not in logs[1].read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    net.hosts[1].kill_all()  # its torchrun agent and workers, every process on the host
    time.sleep(12)  # node 0's torchrun waits for it meanwhile
    again = start(1, {})
    for proc in (node0, again):
        proc.wait(timeout=240)
        assert proc.returncode == 0, logs[0].read_text()[-3000:] + logs[1].read_text()[-3000:]
    return logs


def test_a_link_dropped_mid_run_is_named_the_network_with_its_nodes(projects, tmp_path):
    """Issue 47: every packet between the nodes dropped once they train (nftables on node
    1): both ranks wait in the same collective until --dist-timeout (6 s) and fail, each
    on its own node's records; genie explain --hang reads both folders."""
    from .hosts import HOST_ENV

    dirs = copies(projects["static"], tmp_path, 2)
    folders = [d / "runs" / "smoke" / "hang" for d in dirs]
    args = ["--smoke", "--epochs", "40", "--dist-timeout", "0.1", "--tracker", "none"]
    env = {**os.environ, **HOST_ENV, "MASTER_ADDR": MASTER, "MASTER_PORT": PORT}
    with hosts.network([hosts.HostConfig("node0"), hosts.HostConfig("node1")]) as net:
        for k in (0, 1):
            with open(dirs[k] / "out.log", "w") as log:
                argv = net.hosts[k].command(["bash", "launch/multi_node.sh", str(k), *args])
                subprocess.Popen(argv, cwd=dirs[k], env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while "step 10/" not in (dirs[0] / "out.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        cut(net.hosts[1])
        while not all(list(f.glob("stacks-*")) for f in folders) and time.monotonic() < deadline:
            time.sleep(0.2)
        said = run_genie("explain", *[a for f in folders for a in ("--hang", str(f))])
    logs = "".join((d / "out.log").read_text()[-2000:] for d in dirs)
    assert said.returncode == 0, said.stdout + said.stderr + logs
    first = said.stdout.splitlines()[0]
    assert re.fullmatch(
        r"collective #\d+ \(\w+ of \w+\[\d+\], \w+\.py:\d+\): every rank came "
        # gloo's words for its timeout: "Timed out waiting ..." or "Application timeout
        # caused pair closure", whichever side notices first
        r"to it and the connection between them \(node0, node1\) failed \(rank \d: "
        r".*(Timed out|timeout caused pair closure).*\)",
        first,
    ), (
        first + logs
    )
    assert "genie doctor --reach" in said.stdout


# ---------------------------------------------------------------- torch alone, explained


def torchrun_alone(rank: int, rdzv: str, master: str = MASTER, conf: str = "") -> list[str]:
    """The plain torchrun line a user might write, without launch/network.sh."""
    args = ["torchrun", "--nnodes=2", "--nproc_per_node=1"]
    if rdzv == "c10d":
        args += ["--rdzv_backend=c10d", f"--rdzv_endpoint={master}:{PORT}", "--rdzv_id=x",
                 f"--rdzv_conf=is_host={int(rank == 0)}{conf}"]  # fmt: skip
    else:
        args += [f"--node_rank={rank}", f"--master_addr={master}", f"--master_port={PORT}"]
    return [*args, "train.py", "--smoke"]


TORCH_ALONE = {
    # signature: (rendezvous, node 1's host, node 1's master, started nodes, seconds, conf);
    # the run is stopped once its failure is in the log, or after the seconds (a loaded
    # machine is slow to get there), except hostname_unresolved: node 0 is killed after them
    "hostname_unresolved": ("c10d", {}, MASTER, (0, 1), 15, ""),
    "loopback_peer": ("static", {"own_name": "127.0.1.1"}, MASTER, (0, 1), 90, ""),
    "full_mesh": ("static", {"decoy": True, "own_name": "decoy"}, MASTER, (0, 1), 90, ""),
    "no_route": ("c10d", {}, f"{hosts.SUBNET}.9", (0, 1), 90, ",read_timeout=8"),
    "rendezvous_timeout": ("c10d", {}, MASTER, (1,), 90, ",read_timeout=8"),
}


def failed_with(signature: str, logs: list[Path]) -> bool:
    """Whether the logs show that failure yet (torchrun's output is still being written)."""
    if signature == "hostname_unresolved":
        return False  # it comes only once node 0 is gone
    pattern = next(s.pattern for s in SIGNATURES if s.id == signature)
    text = strip_prefixes("".join(log.read_text(errors="replace") for log in logs))
    return re.search(pattern, text, re.MULTILINE) is not None


def wait_for(signature: str, logs: list[Path], seconds: float, procs=()) -> None:
    """Until the logs show that failure (then 2 s more: the rest of that rank's error), the
    seconds pass, or every one of ``procs`` (when given) has exited."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (not procs or any(p.poll() is None for p in procs)):
        if failed_with(signature, logs):
            time.sleep(2)
            return
        time.sleep(0.5)


@pytest.mark.parametrize("signature", list(TORCH_ALONE))
def test_genie_explain_names_what_torch_alone_fails_on(projects, tmp_path, signature):
    rdzv, node1, master1, started, seconds, conf = TORCH_ALONE[signature]
    from .hosts import HOST_ENV

    dirs = copies(projects[rdzv], tmp_path, 2)
    configs = [hosts.HostConfig("node0", **node1), hosts.HostConfig("node1", **node1)]
    logs = [d.with_suffix(".log") for d in dirs]
    with hosts.network(configs) as net:
        procs = []
        for k in started:
            argv = net.hosts[k].command(
                torchrun_alone(k, rdzv, MASTER if k == 0 else master1, conf)
            )
            with open(logs[k], "w") as log:
                procs.append(subprocess.Popen(argv, cwd=dirs[k], env={**os.environ, **HOST_ENV},
                                              stdout=log, stderr=subprocess.STDOUT))  # fmt: skip
        wait_for(signature, [logs[k] for k in started], seconds, procs)
        if signature == "hostname_unresolved":
            net.hosts[0].kill_all()  # node 0 gone: node 1 sees its store close
            wait_for("store_closed", logs[1:], 60)  # when its agent next talks to the store
            tail = logs[1].read_text(errors="replace")[-3000:]
            assert failed_with("store_closed", logs[1:]), f"node 1 after node 0 died:\n{tail}"
    # one file with every node's output, as a SLURM job's log has it
    log = tmp_path / "job.log"
    log.write_text("".join(logs[k].read_text(errors="replace") for k in started))
    result = run_genie("explain", str(log))
    assert result.returncode == 0, log.read_text()[-3000:]
    cause = next(s.cause for s in SIGNATURES if s.id == signature).split("{")[0]
    assert cause in result.stdout.replace("\n", " ").replace("  ", " "), result.stdout
    if signature == "hostname_unresolved":
        assert "the rendezvous store on node 0 went away" in result.stdout.replace("\n", " ")


def test_genie_explain_on_a_log_without_known_failures_exits_1(tmp_path):
    log = tmp_path / "ok.log"
    log.write_text("epoch 0 done: loss 2.3\n")
    result = run_genie("explain", str(log))
    assert result.returncode == 1 and "No known failure signature matched" in result.stdout
    missing = run_genie("explain", str(tmp_path / "none.log"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr


# ---------------------------------------------------------------- doctor on a host


@pytest.mark.parametrize(("own_name", "status"), [("address", "pass"), ("127.0.1.1", "warn"),
                                                   ("none", "warn")])  # fmt: skip
def test_doctor_on_node_1_says_whether_its_hostname_leads_the_others_to_it(
    projects, tmp_path, own_name, status
):
    """warn, not fail: the project's launch script passes --local_addr and the interfaces."""
    from .hosts import HOST_ENV

    dirs = copies(projects["c10d"], tmp_path, 2)
    configs = [hosts.HostConfig("node0"), hosts.HostConfig("node1", own_name=own_name)]
    with hosts.network(configs) as net:
        argv = net.hosts[1].command([sys.executable, "-m", "genie", "doctor", "--project",
                                     str(dirs[1]), "--json"])  # fmt: skip
        done = subprocess.run(argv, env={**os.environ, **HOST_ENV}, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
    checks = {c["id"]: c for c in json.loads(done.stdout)}
    assert checks["hostname"]["status"] == status, checks["hostname"]
    if status != "pass":
        assert "--local_addr" in checks["hostname"]["detail"]
    assert checks["binding"]["detail"].startswith("route to the master: eth0 (10.77.0.2)")


def test_the_launch_script_finds_the_route_without_ip_too(projects, tmp_path):
    """Where iproute2 is missing, Python's own routing finds the address and interface."""
    dirs = copies(projects["c10d"], tmp_path, 2)
    bare = tmp_path / "no-ip"
    bare.mkdir()
    for tool in ("bash", "python3", "getent", "awk", "sed", "uname", "cat", "mktemp"):
        found = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        (bare / tool).symlink_to(found)
    configs = [hosts.HostConfig("node0"), hosts.HostConfig("node1", interface="ens5")]
    with hosts.network(configs) as net:
        script = "source launch/network.sh && node_network 10.77.0.1 && echo $LOCAL_ADDR"
        argv = net.hosts[1].command(["bash", "-c", script])
        done = subprocess.run(argv, cwd=dirs[1], env={"PATH": str(bare)}, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["10.77.0.2"]
    assert "on ens5" in done.stderr and "GLOO_SOCKET_IFNAME=ens5" in done.stderr
