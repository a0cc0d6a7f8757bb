"""Expensive runs several e2e tests share: each is made once per session (per xdist
worker; tests that share one carry its xdist_group, so that it is made once in all)."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from genie.smoke.verdict import parse_reports

from .. import scheduling
from ..conftest import TORCHRUN, free_port, run_genie

CPU_ENV = {"CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
# This Python's folder first on PATH: a launch script starts this environment's torchrun.
THIS_PYTHON = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
# 8 optimizer steps an epoch with --smoke; validation every 3 steps, so the HF Trainer
# checkpoints mid-epoch too (ddp and Lightning: every 3 steps, --smoke's --save-every);
# every step's loss and LR logged, to compare runs step by step.
ELASTIC_TRAINING = ("--epochs", "3", "--eval-every", "3", "--log-every", "1")
KILLS = "kill:*:5,10,17"  # launch/multi_node.sh allows three restarts


OFFLINE = {
    **CPU_ENV,
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


def report_of(output: str) -> dict:
    """The smoke report a run printed (its one GENIE_SMOKE line), read as genie
    reads it: torchrun's tail may glue the next rank's prefix onto the line."""
    [report] = parse_reports(output.splitlines())
    assert "unparsable" not in report, report
    return report


# Projects generated in this process, by flags: a test gets its own copy of the pristine one
# (generation is checked by the goldens and genie new's own tests; its 2 s add up here).
_GENERATED: dict[tuple[str, ...], Path] = {}


def generate(where: Path, *flags: str, name: str = "proj") -> Path:
    """``genie new NAME --yes --no-smoke FLAGS``, copied to ``where / name``."""
    key = (name, *flags)
    if key not in _GENERATED:
        made = Path(tempfile.mkdtemp(prefix="genie-generated-"))
        atexit.register(shutil.rmtree, made, ignore_errors=True)
        result = run_genie("new", name, "--yes", "--no-smoke", *flags, cwd=made)
        assert result.returncode == 0, result.stderr
        _GENERATED[key] = made / name
    shutil.copytree(_GENERATED[key], where / name, symlinks=True)
    return where / name


def inject(project: Path, anchor: str, code: str) -> None:
    """Break the generated train.py on purpose by inserting ``code`` before ``anchor``."""
    path = project / "train.py"
    source = path.read_text()
    # whole lines: an anchor must start one (a shorter indent matching inside a longer one
    # would insert code mid-line)
    assert source.count("\n" + anchor) == 1 and not anchor.startswith("\n"), anchor
    path.write_text(source.replace("\n" + anchor, "\n" + code + anchor))


def torchrun(project: Path, *args: str, nproc: int = 2, script: str = "train.py",
             env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:  # fmt: skip
    """``torchrun --standalone --nproc_per_node=NPROC SCRIPT ARGS`` in ``project``, its output
    captured; ``env`` (by default OFFLINE: no GPU, no network) over this environment's."""
    return subprocess.run(
        [*TORCHRUN, "--standalone", f"--nproc_per_node={nproc}", script, *args],
        cwd=project, env={**os.environ, **(OFFLINE if env is None else env)},
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


PREPARE_ANCHOR = (
    '    shown and every rank stops."""\n'  # the end of custom data.prepare's docstring
)
COUNT_PREPARE = (
    "    with open('prepared.txt', 'a') as f:  # genie's test: which rank prepared\n"
    "        f.write(__import__('os').environ['RANK'] + '\\n')\n"
)


def count_preparations(project: Path) -> None:
    """Make data.prepare() (the custom task's) append its global rank to prepared.txt."""
    path = project / "data.py"
    source = path.read_text()
    assert source.count(PREPARE_ANCHOR) == 1
    path.write_text(source.replace(PREPARE_ANCHOR, PREPARE_ANCHOR + COUNT_PREPARE))


# The tests that mostly wait (separate hosts, a node started late, the test SLURM's queue,
# timeouts): one after another on a worker of their own (tests/scheduling.py); the test SLURM
# is started once there.
WAITING_GROUP = scheduling.waiting_group()


def combo_group(combo: str) -> pytest.MarkDecorator:
    """The xdist group of the tests that share ``combo_runs(combo)``."""
    return pytest.mark.xdist_group(f"combo-{combo}")


@dataclass(frozen=True)
class ComboRun:
    """One framework-task combination made by ``genie new`` (its smoke test included), then
    the generated project's own pytest, its temporary folders kept under ``basetemp``."""

    project: Path
    new: subprocess.CompletedProcess
    own_tests: subprocess.CompletedProcess
    basetemp: Path


@pytest.fixture(scope="session")
def combo_runs(tmp_path_factory) -> Callable[[str], ComboRun]:
    """combo_runs(combo): that combination's ComboRun, made on first use (the tests of a
    combination share one xdist group, so it is made once)."""
    made: dict[str, ComboRun] = {}

    def get(combo: str) -> ComboRun:
        if combo not in made:
            framework, task = combo.split("-")
            root = tmp_path_factory.mktemp(combo)
            # ddp-custom is genie's default: made by `genie new NAME --yes` alone
            flags = [] if combo == "ddp-custom" else ["--framework", framework, "--task", task]
            new = run_genie("new", combo, "--yes", *flags, cwd=root, **OFFLINE)
            basetemp = root / "own-tests"
            own = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 f"--basetemp={basetemp}", "tests"],
                cwd=root / combo, env={**os.environ, **OFFLINE}, capture_output=True, text=True,
                timeout=900,
            ) if new.returncode == 0 else subprocess.CompletedProcess([], 1, "", "")  # fmt: skip
            made[combo] = ComboRun(root / combo, new, own, basetemp)
        return made[combo]

    return get


def elastic_group(framework: str) -> pytest.MarkDecorator:
    """The xdist group of the tests that share ``elastic_runs(framework)``."""
    return pytest.mark.xdist_group(f"elastic-{framework}")


@dataclass(frozen=True)
class ElasticRun:
    """A 2-node project trained twice with --smoke: in ``interrupted`` a worker of node 1
    was killed mid-epoch and torchrun restarted the group; in ``straight``, no fault."""

    framework: str
    project: Path
    env: dict[str, str]
    marker: Path  # the fault's marker file: it exists once the fault fired
    nodes: list[subprocess.CompletedProcess]  # node 0's, node 1's (output in stdout)
    straight: subprocess.CompletedProcess
    prepared: list[str]  # ddp: the ranks that prepared the data, one per start (ddp only)


def _elastic_run(root: Path, framework: str) -> ElasticRun:
    project = generate(
        root, "--framework", framework, "--nodes", "2", "--nproc-per-node", "1",
        "--gpus-per-node", "0", "--master-addr", socket.gethostname(),
        "--master-port", str(free_port()), "--rdzv", "c10d",
    )  # fmt: skip
    if framework == "ddp":
        count_preparations(project)
    env = {**os.environ, **CPU_ENV, **THIS_PYTHON}
    # Both nodes share the checkpoint directory, as on a shared filesystem.
    train = ["--smoke", *ELASTIC_TRAINING, "--checkpoint-dir", "interrupted"]
    marker = root / "fault-fired"
    # node 1's worker is killed whichever rank c10d gave it (nodes join in any order).
    # genie's own loop counts steps across restarts: killed three times (between step
    # checkpoints, just after one, at an epoch's first step); the Trainers count steps per
    # process: killed once, at step 10 (the marker keeps the restarted one from counting
    # to 10 again)
    fault = KILLS if framework == "ddp" else "kill:*:10"
    faulty = {**env, "GENIE_FAULT": fault, "GENIE_FAULT_MARKER": str(marker)}
    nodes = [
        subprocess.Popen(
            ["bash", "launch/multi_node.sh", str(rank), *train],
            cwd=project, env=faulty if rank == 1 else env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=400)[0] for node in nodes]
    straight = torchrun(
        project, "--smoke", *ELASTIC_TRAINING, "--checkpoint-dir", "straight",
        env=env, timeout=400,
    )  # fmt: skip
    # read now: the tests that share this project train in it again
    counted = project / "prepared.txt"
    prepared = counted.read_text().split() if counted.exists() else []
    return ElasticRun(
        framework, project, env, marker,
        [subprocess.CompletedProcess(n.args, n.returncode, out) for n, out in zip(nodes, outputs, strict=True)],
        straight, prepared,
    )  # fmt: skip


@pytest.fixture(scope="session")
def elastic_runs(tmp_path_factory) -> Callable[[str], ElasticRun]:
    """elastic_runs(framework): that framework's ElasticRun, made on first use."""
    made: dict[str, ElasticRun] = {}

    def get(framework: str) -> ElasticRun:
        if framework not in made:
            made[framework] = _elastic_run(tmp_path_factory.mktemp(framework), framework)
        return made[framework]

    return get


FSDP_STRAIGHT = pytest.mark.xdist_group("fsdp-straight")  # the tests that share fsdp_straight


@pytest.fixture(scope="session")
def fsdp_straight(tmp_path_factory) -> Path:
    """A project with an uninterrupted FSDP --smoke run of 2 epochs (16 steps) in
    ``straight/``: what interrupted runs of the same project must end with, bit for bit on
    CPU; the --smoke model's sharded checkpoints."""
    project = generate(tmp_path_factory.mktemp("fsdp-straight"), "--strategy", "fsdp")
    run = torchrun(project, "--smoke", "--epochs", "2", "--checkpoint-dir", "straight")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return project
