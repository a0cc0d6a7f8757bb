"""The golden files: what genie renders for each variant of tests/variants.py, every distinct
file kept once.

``tests/golden/files/<path>/<stored>`` is one content of a project's ``<path>``, named after the
first variant (in ``VARIANTS`` order) that renders it; ``tests/golden/map.txt`` says, a line
each, which one every variant has: ``<path> <variant> <stored>``. A template change that
affects every variant alike edits one stored file; one that sets variants apart adds a stored
file and changes their lines of the map. test_render.py checks them against genie; accept an
intended change with ``GENIE_UPDATE_GOLDEN=1 python -m pytest tests/test_render.py``.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from genie.generate import archive, write

from .conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"
FILES, MAP = "files", "map.txt"
UPDATE = "GENIE_UPDATE_GOLDEN=1 python -m pytest tests/test_render.py"
HEADER = f"""\
# <path> <variant> <stored>: the variant's <path> is tests/golden/{FILES}/<path>/<stored>,
# stored under the name of the first variant that renders it.
# Written by `{UPDATE}`; not edited by hand.
"""


def kept(rendered: dict[str, bytes]) -> dict[str, bytes]:
    """The files of a render the goldens keep: all but the base archive (binary, and checked
    against the other files by test_render.py)."""
    return {path: data for path, data in rendered.items() if path != archive.ARCHIVE}


def read_map(root: Path = GOLDEN) -> dict[str, dict[str, str]]:
    """Every variant's files: variant -> {path: the name its content is stored under}."""
    found: dict[str, dict[str, str]] = {}
    for line in (root / MAP).read_text().splitlines():
        if line and not line.startswith("#"):
            path, variant, stored = line.rsplit(" ", 2)
            found.setdefault(variant, {})[path] = stored
    return found


def variants(root: Path = GOLDEN) -> list[str]:
    return sorted(read_map(root))


def files(variant: str, root: Path = GOLDEN) -> dict[str, Path]:
    """The variant's files: its project path -> the stored file."""
    stored = read_map(root)[variant]
    return {path: root / FILES / path / stored[path] for path in sorted(stored)}


def modules(variant: str, root: Path = GOLDEN) -> dict[str, Path]:
    """The variant's Python modules: path in the project -> its golden file."""
    return {path: f for path, f in files(variant, root).items() if path.endswith(".py")}


def unpack(variant: str, target: Path, root: Path = GOLDEN) -> Path:
    """The variant's project written to ``target`` as genie writes it (launchers executable)."""
    write.write_project(target, {path: f.read_bytes() for path, f in files(variant, root).items()})
    return target


def differences(variant: str, rendered: dict[str, bytes], root: Path = GOLDEN) -> list[str]:
    """One line per file of ``rendered`` that its goldens lack, have more or hold otherwise."""
    stored = read_map(root).get(variant, {})
    found = []
    for path in sorted(rendered.keys() | stored.keys()):
        kept = root / FILES / path / stored.get(path, "")
        if path not in stored:
            found.append(f"{variant}: {path} is rendered but has no golden")
        elif path not in rendered:
            found.append(f"{variant}: {path} has a golden ({shown(kept)}) but is not rendered")
        elif not kept.is_file():
            found.append(f"{variant}: {path}: the map names {shown(kept)}, which is missing")
        elif kept.read_bytes() != rendered[path]:
            found.append(f"{variant}: {path} differs from {shown(kept)}:")
            found.extend(diff(kept.read_bytes(), rendered[path]))
    return found


def shown(place: Path) -> str:
    return str(place.relative_to(ROOT) if place.is_relative_to(ROOT) else place)


def diff(golden: bytes, rendered: bytes, most: int = 30) -> list[str]:
    lines = difflib.unified_diff(
        golden.decode(errors="replace").splitlines(),
        rendered.decode(errors="replace").splitlines(),
        "golden", "rendered", lineterm="",
    )  # fmt: skip
    shown = list(lines)
    return [f"    {line}" for line in shown[:most]] + (["    ..."] if len(shown) > most else [])


def store(rendered: dict[str, dict[str, bytes]], root: Path = GOLDEN) -> None:
    """Rewrite the goldens from ``rendered`` (variant -> files, in VARIANTS order): each
    distinct content of a path once, the map, and no stored file the map does not name."""
    names: dict[tuple[str, bytes], str] = {}  # (path, content) -> its first variant
    lines = []
    for variant, project in rendered.items():
        for path, data in project.items():
            lines.append(f"{path} {variant} {names.setdefault((path, data), variant)}\n")
    kept = {root / FILES / path / name: data for (path, data), name in names.items()}
    for place, data in kept.items():
        if not place.is_file() or place.read_bytes() != data:
            place.parent.mkdir(parents=True, exist_ok=True)
            place.write_bytes(data)
    for place in sorted((root / FILES).rglob("*"), reverse=True):  # a folder after its files
        if place.is_file() and place not in kept:
            place.unlink()
        elif place.is_dir() and not any(place.iterdir()):
            place.rmdir()
    (root / MAP).write_text(HEADER + "".join(sorted(lines)))


def unused(root: Path = GOLDEN) -> list[str]:
    """Stored files the map names for no variant (store() removes them)."""
    named = {
        root / FILES / path / name for v in read_map(root).values() for path, name in v.items()
    }
    every = (root / FILES).rglob("*")
    return sorted(str(p.relative_to(root)) for p in every if p.is_file() and p not in named)
