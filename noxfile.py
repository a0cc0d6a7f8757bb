"""Prove the generated projects on older PyTorch versions (run by hand, not in CI).

    nox -s smoke                          # every version below
    nox -s "smoke(torch='1.13')"          # one of them
    GENIE_NOX_FRAMEWORKS=ddp,lightning,hf nox -s smoke
    GENIE_NOX_STRATEGIES=ddp nox -s smoke  # skip the FSDP runs (ddp framework, torch 2.2+)

For each torch minor the session generates a project with genie for that version (and the
Python it needs), creates a fresh virtual environment with that Python (from pyenv), installs
the project's own requirements (requirements-torch.txt and requirements.txt) into it, and
runs `genie smoke --python <that venv>`: the project trains under torchrun in exactly the
environment its requirements describe.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import nox

# torch minor -> the Python to test it with (1.13's torchrun crashes on 3.11: use 3.10)
VERSIONS = {"1.13": "3.10", "2.0": "3.10", "2.4": "3.11", "2.6": "3.11", "2.14": "3.11"}
FRAMEWORKS = os.environ.get("GENIE_NOX_FRAMEWORKS", "ddp").split(",")
# fsdp runs for the ddp framework where FSDP runs on CPU (torch 2.14+; measured: FSDP1 on 2.4
# and FSDP2 on 2.6 fail on CPU); Lightning's and the Trainer's FSDP need GPUs.
STRATEGIES = os.environ.get("GENIE_NOX_STRATEGIES", "ddp,fsdp").split(",")
FSDP_FROM = (2, 14)
WORK = Path(os.environ.get("GENIE_NOX_DIR", "/tmp/genie-nox"))


def interpreter(version: str) -> str:
    """A python<version> from pyenv or PATH."""
    for candidate in sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}")):
        return str(candidate)
    found = shutil.which(f"python{version}")
    if found is None:
        raise RuntimeError(f"no Python {version} found (pyenv install {version})")
    return found


@nox.session(python=False)
@nox.parametrize("torch", list(VERSIONS))
def smoke(session: nox.Session, torch: str) -> None:
    python = VERSIONS[torch]
    version = tuple(int(x) for x in torch.split("."))
    runs = [(f, "ddp") for f in FRAMEWORKS if "ddp" in STRATEGIES]
    if "fsdp" in STRATEGIES and version >= FSDP_FROM and "ddp" in FRAMEWORKS:
        runs.append(("ddp", "fsdp"))
    for framework, strategy in runs:
        where = WORK / f"torch{torch}-{framework}-{strategy}"
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        project = where / "project"
        session.run(
            sys.executable, "-m", "genie", "new", str(project), "--yes", "--no-smoke",
            "--torch", torch, "--python", python, "--framework", framework,
            *(["--strategy", strategy] if framework != "dp" else []),
        )  # fmt: skip
        venv = where / "venv"
        session.run(interpreter(python), "-m", "venv", str(venv))
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        session.run(*pip, "--upgrade", "pip")
        session.run(*pip, "-r", str(project / "requirements-torch.txt"),
                    "-r", str(project / "requirements.txt"))  # fmt: skip
        session.run(str(venv / "bin" / "python"), "-m", "pip", "freeze", "--exclude-editable")
        session.run(
            sys.executable, "-m", "genie", "smoke", str(project),
            "--python", str(venv / "bin" / "python"),
        )  # fmt: skip
