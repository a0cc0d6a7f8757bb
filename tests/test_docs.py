"""The user's guide in docs/ builds with mkdocs, strictly: a broken link fails it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_docs_build_strictly(tmp_path):
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "multi-node" / "index.html").is_file()


def test_a_broken_link_fails_the_build(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    with (tmp_path / "docs" / "smoke-test.md").open("a") as page:
        page.write("\nSee [the missing page](no-such-page.md).\n")
    done = build(tmp_path, tmp_path / "site")
    assert done.returncode != 0 and "no-such-page.md" in done.stdout + done.stderr


def test_the_readme_is_a_first_page_whose_links_are_the_guide():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 100  # what a user needs first; the rest is in docs/
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    pages = set(re.findall(r"[\w-]+\.md", str(nav)))
    linked = re.findall(r"\]\(docs/([\w-]+\.md)\)", readme)
    assert linked and set(linked) <= pages and set(linked) | {"index.md"} == pages
