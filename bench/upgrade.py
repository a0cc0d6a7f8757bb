"""genie upgrade over the corpus of user edits (tests/upgrade_corpus.py): each edit made to
the default project as an older genie wrote it, then ``genie upgrade`` (with its smoke test
when the merge is clean). Printed per edit, beside git's own three-way merge
(``git merge-file``) of the same files as the baseline, then the shares:

- edits kept without a conflict, of those in regions genie did not change (goal: all);
- conflicts only where both sides changed the same or adjacent lines;
- smoke tests passed after the conflict-free upgrades.

    python bench/upgrade.py            # about 20 smoke runs: a few minutes on 2 cores
    python bench/upgrade.py --no-smoke
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from genie.detect import Machine  # noqa: E402
from genie.generate import archive as base  # noqa: E402
from genie.generate import write  # noqa: E402
from genie.spec import build_spec  # noqa: E402
from tests.upgrade_corpus import EDITS, SPEC, collide, older_templates, render_with  # noqa: E402

MACHINE = Machine(gpus=0, torch="2.14.1", python="3.11", hostname="node0")
RECORDS = (".genie.yml", base.ARCHIVE)
ENV = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "CUDA_VISIBLE_DEVICES": ""}


def git_conflicts(old: bytes, mine: bytes, new: bytes, scratch: Path) -> int:
    """How many conflicts ``git merge-file`` leaves merging the same three files."""
    paths = [scratch / name for name in ("ours", "base", "theirs")]
    for path, data in zip(paths, (mine, old, new), strict=True):
        path.write_bytes(data)
    done = subprocess.run(["git", "merge-file", "-p", *map(str, paths)], capture_output=True)
    return max(done.returncode, 0)  # git's exit status: the number of conflicts


def run_one(edit, old: dict, new: dict, smoke: bool, scratch: Path) -> dict:
    user = {p: d for p, d in old.items() if p not in RECORDS}
    mine = edit.apply(user)
    touched = [p for p in set(mine) | set(user) if mine.get(p) != user.get(p)]
    shared = [p for p in touched if p in mine and p in user and p in new]
    target = scratch / "proj"
    write.write_project(target, {**mine, **{p: old[p] for p in RECORDS}})
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "genie", "upgrade", str(target), *([] if smoke else ["--no-smoke"])],
        env=ENV,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    expected = {p: d for p, d in new.items() if p not in RECORDS}
    kept = False
    if not edit.conflicts:
        expected = edit.apply(expected)
        now = {
            str(p.relative_to(target)): p.read_bytes()
            for p in target.rglob("*")
            if p.is_file() and not p.name.endswith(".genie-new")
        }
        kept = {p: d for p, d in now.items() if p not in RECORDS} == expected
    return {
        "edit": edit.name,
        "collides": any(collide(user[p], mine[p], new[p]) for p in shared),
        "conflict": done.returncode == 1 and "conflict" in done.stderr,
        "kept": kept,
        "smoke": "PASS" in done.stdout if smoke and done.returncode == 0 else None,
        "git": sum(git_conflicts(user[p], mine[p], new[p], scratch) for p in shared),
        "seconds": seconds,
    }


def main() -> None:
    smoke = "--no-smoke" not in sys.argv
    spec = build_spec(SPEC, MACHINE)
    with tempfile.TemporaryDirectory() as tmp:
        old = render_with(older_templates(Path(tmp, "older")), spec)
        new = render_with(None, spec)
        rows = []
        for i, edit in enumerate(EDITS):
            scratch = Path(tmp, f"edit{i}")
            scratch.mkdir()
            rows.append(run_one(edit, old, new, smoke, scratch))
    print(f"{'edit':<36} {'genie':<9} {'kept':<5} {'smoke':<6} {'git':<9} seconds")
    for r in rows:
        verdict = "conflict" if r["conflict"] else "clean"
        git = f"{r['git']} confl." if r["git"] else "clean"
        smoked = {True: "PASS", False: "FAIL", None: "-"}[r["smoke"]]
        print(
            f"{r['edit']:<36} {verdict:<9} {str(r['kept']):<5} {smoked:<6} {git:<9} "
            f"{r['seconds']:.1f}"
        )
    apart = [r for r in rows if not r["collides"]]
    print(f"\nedits in regions genie did not change, kept without conflict: "
          f"{sum(r['kept'] and not r['conflict'] for r in apart)}/{len(apart)}")  # fmt: skip
    print(f"conflicts where both changed the same or adjacent lines: "
          f"{sum(r['conflict'] for r in rows if r['collides'])}/{len(rows) - len(apart)}; "
          f"elsewhere: {sum(r['conflict'] for r in apart)}")  # fmt: skip
    print(f"git merge-file (baseline) conflicts on the same edits: "
          f"{sum(bool(r['git']) for r in rows if r['collides'])}/{len(rows) - len(apart)} "
          f"colliding, {sum(bool(r['git']) for r in apart)} elsewhere")  # fmt: skip
    if smoke:
        passed = [r["smoke"] for r in apart if r["kept"]]
        print(f"smoke tests passed after conflict-free upgrades: {sum(passed)}/{len(passed)}")


if __name__ == "__main__":
    main()
