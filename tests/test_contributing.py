"""CONTRIBUTING.md and docs/development.md describe today's tree: every path of the repository
they name exists, the map names every stage, and the commands live in one place."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import ROOT

# The pages for contributors that name the repository's files.
PAGES = ("CONTRIBUTING.md", "docs/development.md")
# A path into one of the repository's top folders, in backquotes or not: `genie/cli/`,
# genie/spec/questions.py, templates/project/templates/frameworks/<key>/, genie/doctor/*.py.
# It ends on a letter, a digit, a slash, a star or a placeholder, never on punctuation.
TOP_PATH = re.compile(
    r"(?<![\w./-])((?:genie|tests|templates|bench|scripts|docs)/(?:[\w./<>{}*-]*[\w/>}*])?)"
)
# Any path in backquotes (`shared/reference/compat.md`, `cli/`), whatever its first folder...
QUOTED_PATH = re.compile(r"`([\w.{}<>*-]+/[\w./{}<>*-]*)`")
# ... except the folders of a generated project, which these pages name too.
PROJECT_FOLDERS = (".genie/", "launch/", "checkpoints/", "logs/", "runs/")
PLACEHOLDER = re.compile(r"<[^/<>]+>")  # <key>, <name>: any one name there


def named_paths(text: str) -> list[str]:
    """The repository paths a page names, each once, in order."""
    quoted = [p for p in QUOTED_PATH.findall(text) if not p.startswith(PROJECT_FOLDERS)]
    return list(dict.fromkeys(TOP_PATH.findall(text) + quoted))


def exists(path: str, root: Path = ROOT) -> bool:
    pattern = PLACEHOLDER.sub("*", path).rstrip("/")
    return any(root.glob(pattern)) if "*" in pattern else (root / pattern).exists()


def missing(text: str, root: Path = ROOT) -> list[str]:
    """The paths ``text`` names that are not in the repository at ``root``."""
    return [path for path in named_paths(text) if not exists(path, root)]


@pytest.mark.parametrize("page", PAGES)
def test_every_path_a_contributor_page_names_exists(page):
    text = (ROOT / page).read_text()
    assert len(named_paths(text)) > 10  # the pattern still finds the paths the page names
    assert missing(text) == []


def test_the_path_check_can_fail():
    text = (
        "The map: `genie/cli/`, genie/spec/questions.py, `genie/doctor/*.py`,"
        " templates/project/templates/frameworks/<key>/train.py.j2 and a project's"
        " `launch/multi_node.sh`. Gone: `genie/signatures.py`, tests/test_nothing_here.py,"
        " `shared/reference/compat.md` and `cli/` (not in the repository)."
    )
    assert missing(text) == [
        "genie/signatures.py",
        "tests/test_nothing_here.py",
        "shared/reference/compat.md",
        "cli/",
    ]


def stages(root: Path = ROOT) -> set[str]:
    """genie's modules and packages, each as a path: genie/cli/, genie/wizard.py, ..."""
    package = root / "genie"
    return {
        f"genie/{p.name}/" if p.is_dir() else f"genie/{p.name}"
        for p in package.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").is_file()
    }


def test_the_map_names_every_stage():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    assert "genie/cli/" in stages() and "genie/cjk.py" in stages()
    assert {path for path in stages() if f"`{path}`" not in text} == set()


def test_the_commands_of_the_inner_loop_are_written_once():
    """CONTRIBUTING points to docs/development.md for them instead of a second copy."""
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    assert "docs/development.md" in contributing
    assert not re.search(r"```(bash|console|sh)\b", contributing)
    assert "pip install" not in contributing and "python -m pytest" not in contributing
