"""Helpers the unit tests share (the e2e ones are in e2e/conftest.py): genie run for real,
specs and rendered projects, reading generated code, ports."""

from __future__ import annotations

import ast
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

# Tests read genie's English messages, whatever language the machine running them speaks; the
# Chinese tests (tests/test_i18n.py) choose Chinese explicitly.
# LANGUAGE comes first in genie's (and gettext's) order.
os.environ["LANGUAGE"] = "en"

from genie.detect import Machine  # noqa: E402
from genie.generate import engine, write  # noqa: E402
from genie.smoke import local  # noqa: E402
from genie.smoke.plan import SmokePlan  # noqa: E402
from genie.spec import Spec, build_spec  # noqa: E402

from . import scheduling  # noqa: E402
from .variants import VARIANTS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GENIE = [sys.executable, "-m", "genie"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
# A machine with no GPU and torch 2.14 installed, whatever this one has.
CPU_MACHINE = Machine(gpus=0, torch="2.14.1", python="3.11", hostname="node0.cluster")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    return scheduling.auto_workers()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    if config.getvalue("dist") == "loadgroup":
        return scheduling.WaitingAside(config, log)
    return None


def pytest_configure(config: pytest.Config) -> None:
    scheduling.renice_computing_worker()


@pytest.fixture
def cpu_machine() -> Machine:
    return CPU_MACHINE


@pytest.fixture
def gpu_machine() -> Machine:
    return Machine(gpus=8, torch="2.14.1", python="3.11", hostname="node0.cluster")


@pytest.fixture
def cpu_plan(cpu_machine) -> SmokePlan:
    """genie smoke's plan for a default project on cpu_machine."""
    return local.plan(spec_of(cpu_machine, name="p"), cpu_machine, Path("/ck"))


# What a good --smoke run reports (rank 0's one line after contract.MARKER).
GOOD_REPORT = {
    "world_size": 2, "backend": "gloo", "device": "cpu", "precision": "fp32", "steps": 16,
    "first_loss": 2.3, "last_loss": 0.2, "epoch_loss": 0.4, "params_in_sync": True,
    "val_accuracy": 0.5, "checkpoint_loads": True,
}  # fmt: skip


def run_genie(*args: str, cwd: Path | None = None, timeout: float = 600, **env: str):
    """Run the real ``python -m genie`` with no terminal and no colour."""
    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **env}
    return subprocess.run(
        [*GENIE, *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def spec_of(machine: Machine, **answers) -> Spec:
    """The Spec of a project named "proj" (unless ``name`` is among the answers)."""
    return build_spec({"name": "proj", **answers}, machine)


def render_variant(variant: str) -> dict[str, bytes]:
    """The files genie renders for a variant of tests/variants.py on CPU_MACHINE."""
    return engine.render(spec_of(CPU_MACHINE, **VARIANTS[variant]))


def new_project(where: Path, machine: Machine, **answers) -> Path:
    """Project "p" rendered and written into ``where`` (what genie new writes, no smoke test)."""
    write.write_project(where / "p", engine.render(spec_of(machine, name="p", **answers)))
    return where / "p"


def run_in(directory: Path, code: str) -> subprocess.CompletedProcess:
    """``code`` (dedented) run by this Python in ``directory``, its output captured."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=directory,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def ruff_generated(project: Path) -> subprocess.CompletedProcess:
    """ruff over a generated project, with the rules genie holds its output to."""
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "E,F,W,B,I,UP",
         "--target-version", "py310", "."],
        cwd=project, capture_output=True, text=True,
    )  # fmt: skip


def wizard_raises(monkeypatch, error: type[BaseException]) -> None:
    """genie new's wizard on a terminal, every question of which raises ``error`` (as Ctrl-C
    or the end of input at a prompt does)."""
    from genie import wizard

    def make_ask(machine, **kwargs):
        def ask(field, default, answers):
            raise error

        return ask

    monkeypatch.setattr(wizard, "make_ask", make_ask)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)


# ------------------------------------------------------------------ reading generated code


def project_code(files: dict[str, bytes]) -> str:
    """Every module of a generated project (not its tests) as one source to parse."""
    return "\n".join(
        data.decode().replace("from __future__ import annotations\n", "")
        for path, data in sorted(files.items())
        if path.endswith(".py") and not path.startswith("tests/")
    )


def calls(tree: ast.AST, name: str) -> list[ast.Call]:
    """Every call of ``name`` (a dotted name as written, e.g. 'torch.load') in ``tree``."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == name
    ]


def call_names(source: str) -> set[str]:
    """Dotted names of every call in the source, e.g. 'torch.amp.GradScaler'."""
    return {ast.unparse(n.func) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)}


def call_keywords(source: str, func: str) -> set[str]:
    """The keyword arguments any call of ``func`` in the source passes."""
    return {kw.arg for call in calls(ast.parse(source), func) for kw in call.keywords}


def imported_names(source: str) -> set[str]:
    """``module.name`` for every ``from module import name`` in ``source``."""
    return {
        f"{n.module}.{alias.name}"
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.ImportFrom)
        for alias in n.names
    }


# ------------------------------------------------------------------ ports


def free_port() -> int:
    """A TCP port nothing listens on now (on every address)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def held_port() -> Iterator[int]:
    """A TCP port a socket of this process listens on, until the block ends."""
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        yield int(held.getsockname()[1])
