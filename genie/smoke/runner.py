"""Which smoke runner a project needs, and what it must have before one starts. The runners
share one signature, ``run(spec, project, options) -> SmokeResult``."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from genie import compat
from genie.detect import Machine
from genie.errors import GenieError, SmokeFailed
from genie.i18n import _
from genie.registry import FRAMEWORKS
from genie.smoke import local, nodes, slurm
from genie.smoke.plan import RunOptions, SmokeResult
from genie.spec import Spec


def unavailable(spec: Spec, machine: Machine) -> str | None:
    """Why this machine cannot smoke-test the project at all, or None."""
    why = compat.fsdp_needs_gpus(spec.framework, spec.torch) if spec.sharded else None
    if why and not machine.gpus:
        return _("{why}, and this machine has none: run `genie smoke` on a GPU node").format(
            why=why
        )
    return None


def run(spec: Spec, project: Path, options: RunOptions, on_slurm: bool = False) -> SmokeResult:
    """The smoke test of the project in ``project``: as a SLURM job, on simulated nodes (a
    multi-node project), or on this machine; never raises for a failing project."""
    if on_slurm:
        return slurm.run(spec, project, options)
    if not (project / "train.py").is_file():
        raise GenieError(_("{p} has no train.py: is it a genie project?").format(p=project))
    require_packages(spec, options.python, project)
    if spec.multi_node and FRAMEWORKS[spec.framework].torchrun:
        return nodes.run(spec, project, options)
    return local.run(spec, project, options)


def missing_packages(spec: Spec, python: str = sys.executable) -> list[str]:
    """What the project imports that ``python`` (the interpreter running the test) lacks."""
    needed = ("torch", *compat.packages(spec.framework, spec.task, spec.tracker))
    if python == sys.executable:
        return [name for name in needed if importlib.util.find_spec(name) is None]
    probe = (
        "import importlib.util as u, sys; "
        "print(*[n for n in sys.argv[1:] if u.find_spec(n) is None])"
    )
    try:
        out = subprocess.run(
            [python, "-c", probe, *needed], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        raise GenieError(
            _("cannot run {py}: is it a Python interpreter?").format(py=python)
        ) from None
    return out.split()


def require_packages(spec: Spec, python: str, project: Path) -> None:
    missing = missing_packages(spec, python)
    if missing:
        raise SmokeFailed(
            _(
                "the smoke test runs in {py}, which lacks {pkgs}: {install} there "
                "(or pass genie smoke --python PATH), then try again"
            ).format(
                py=python,
                pkgs=", ".join(missing),
                # with a torch there (another version, say), keep it: the rest only
                install=compat.install_command(project, torch="torch" in missing),
            )
        )
