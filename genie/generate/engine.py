"""Render a project in memory: cookiecutter on the template, black on the Python files.

:func:`render` has no side effects outside a private temp dir. The spec reaches the template
as a private context variable (cookiecutter renders its public string variables as Jinja, so
no user text may go there). The project modules have no file of their own in the template:
each render copies it and adds one stub per module the registry gives the project.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
from pathlib import Path

from genie import scratch
from genie.generate import archive
from genie.generate.catalogue import project_files, project_modules
from genie.generate.context import context
from genie.generate.pause import pause_point
from genie.spec import Spec
from genie.spec.answers import ANSWERS_FILE, dump_answers


def template_root() -> Path:
    """The cookiecutter template: inside the installed package, or at the repository root."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "templates" / "project", package.parent / "templates" / "project"):
        if (candidate / "cookiecutter.json").is_file():
            return candidate
    raise RuntimeError(f"genie's templates are missing next to {package}; reinstall genie")


PROJECT_DIR = "{{cookiecutter.project_dir}}"
# A module's framework renders it from its own template where it has one, else the shared one.
MODULE_STUB = """{% set g = cookiecutter._genie %}
{% include ["frameworks/" ~ g.framework ~ "/NAME.j2", "modules/NAME.j2"] %}
"""


def template_with_modules(spec: Spec, folder: Path) -> Path:
    """A copy of the template in ``folder``, with a stub for each of the project's modules."""
    shutil.copytree(template_root(), folder)
    for module in project_modules(spec):
        (folder / PROJECT_DIR / module.name).write_text(MODULE_STUB.replace("NAME", module.name))
    return folder


def render(spec: Spec) -> dict[str, bytes]:
    """Render the project in memory: relative path -> content, formatted and ready to write."""
    from cookiecutter.main import cookiecutter

    records = (ANSWERS_FILE, archive.ARCHIVE)  # genie's own, written below
    wanted = [path for path, _what in project_files(spec) if path not in records]
    files: dict[str, bytes] = {}
    with scratch.directory("render") as tmp:
        config = Path(tmp, "cookiecutter.yml")
        # Keep cookiecutter's replay files and clone cache out of the user's home.
        config.write_text(f"replay_dir: {tmp}/replay\ncookiecutters_dir: {tmp}/cache\n")
        out = cookiecutter(
            str(template_with_modules(spec, Path(tmp, "template"))),
            no_input=True,
            extra_context={"_genie": context(spec)},
            output_dir=str(Path(tmp, "out")),
            config_file=str(config),
            accept_hooks=False,
        )
        pause_point("render")
        for path in wanted:
            text = Path(out, path).read_text(encoding="utf-8")
            if path.endswith(".py"):
                text = formatted(text)
            files[path] = text.encode("utf-8")
    # what genie wrote, for a later ``genie upgrade`` to merge against (not the answers file:
    # an upgrade writes that one afresh)
    packed = archive.pack(files)
    files[ANSWERS_FILE] = dump_answers(spec).encode("utf-8") + _hashes(files)
    files[archive.ARCHIVE] = packed
    return files


@functools.lru_cache(maxsize=256)
def formatted(source: str) -> str:
    """``source`` formatted by black. Remembered: renders of related projects (several
    versions or frameworks in one process: genie's tests, a re-targeting upgrade) share most
    files, and black takes three quarters of a render."""
    import black

    return black.format_str(source, mode=black.Mode())


def _hashes(files: dict[str, bytes]) -> bytes:
    """Hashes of the generated files, so a later --force knows which ones the user changed."""
    lines = ["files:  # sha256 of each file as genie wrote it"]
    lines += [f'  "{path}": {hashlib.sha256(data).hexdigest()}' for path, data in files.items()]
    return ("\n".join(lines) + "\n").encode("utf-8")
