"""genie upgrade on projects on disk: the corpus of user edits upgraded from an older genie
(tests/upgrade_corpus.py), the command's refusals, its dry run, conflicts, projects made
before the base was kept, and a genie killed while writing. No training here: the smoke runs
after an upgrade are in tests/e2e/test_upgrade_e2e.py."""

from __future__ import annotations

import os
import signal
import subprocess
from difflib import ndiff
from pathlib import Path

import pytest

from genie.detect import Machine
from genie.generate import archive as base
from genie.generate import write
from genie.spec import build_spec
from genie.spec.answers import ANSWERS_FILE
from genie.upgrade import apply, prepare

from .conftest import GENIE, ROOT, run_genie, tree
from .upgrade_corpus import EDITS, SPEC, Edit, collide, older_templates, render_with

MACHINE = Machine(gpus=0, torch="2.14.1", python="3.11", hostname="node0")
RECORDS = (ANSWERS_FILE, base.ARCHIVE)
pytestmark = pytest.mark.xdist_group("upgrade")  # one worker renders the two genies once


@pytest.fixture(scope="module")
def genies(tmp_path_factory) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """The default project as the older genie wrote it, and as genie writes it today."""
    spec = build_spec(SPEC, MACHINE)
    older = older_templates(tmp_path_factory.mktemp("older") / "template")
    return render_with(older, spec), render_with(None, spec)


def users(files: dict[str, bytes]) -> dict[str, bytes]:
    """A project's files but genie's records."""
    return {path: data for path, data in files.items() if path not in RECORDS}


def edited_project(root: Path, files: dict[str, bytes], edit: Edit | None) -> Path:
    """The project ``files`` on disk under ``root``, with ``edit`` made to it."""
    target = root / "proj"
    write.write_project(target, files)
    if edit is not None:
        mine = edit.apply(users(files))
        for path in set(users(files)) - set(mine):
            (target / path).unlink()
        for path, data in mine.items():
            (target / path).parent.mkdir(parents=True, exist_ok=True)
            (target / path).write_bytes(data)
    return target


def upgraded(target: Path, new: dict[str, bytes]) -> list:
    """Upgrade ``target`` to ``new`` as the command does, after its render."""
    planned = prepare.prepare(target, new)
    apply.write(target, planned.steps, planned.records)
    return planned.steps


def added_lines(old: bytes, new: bytes) -> list[str]:
    diff = ndiff(old.decode().splitlines(), new.decode().splitlines())
    return [line[2:] for line in diff if line.startswith("+ ")]


@pytest.mark.parametrize("edit", EDITS, ids=lambda e: e.name)
def test_an_upgrade_keeps_every_edit_and_conflicts_only_where_both_changed_a_line(
    genies, edit, tmp_path
):
    old, new = genies
    mine, before = edit.apply(users(old)), users(old)
    touched = sorted(p for p in set(mine) | set(before) if mine.get(p) != before.get(p))
    both = [p for p in touched if p in mine and p in old and p in new]
    # the corpus says where genie's change meets the user's; check it says so rightly
    assert any(collide(old[p], mine[p], new[p]) for p in both) is edit.conflicts
    target = edited_project(tmp_path, old, edit)
    steps = upgraded(target, new)
    result = tree(target)
    # the edit made to today's project (a conflicting one: today's, the conflict aside)
    expected = users(new) if edit.conflicts else edit.apply(users(new))
    conflicted = [s.path for s in steps if s.conflicts]
    got = {p: d for p, d in users(result).items() if not p.endswith(".genie-new")}
    if edit.conflicts:
        assert conflicted == both
        for path in both:
            text = result[path].decode()
            assert "<<<<<<< yours\n" in text and ">>>>>>> genie\n" in text
            for line in added_lines(old[path], mine[path]) + added_lines(old[path], new[path]):
                assert line in text.splitlines()  # nothing of either side dropped
        got, expected = ({p: d for p, d in f.items() if p not in both} for f in (got, expected))
    assert conflicted == [] or edit.conflicts
    assert got == expected  # every other file: the edit made to today's project
    # deleted: stays deleted, and genie's new version beside it where genie changed it
    beside = {p for p in result if p.endswith(".genie-new")}
    assert beside == {p + ".genie-new" for p in touched if p not in mine and old[p] != new[p]}
    assert result[ANSWERS_FILE] == new[ANSWERS_FILE]
    assert base.unpack(result[base.ARCHIVE]) == users(new)  # the next upgrade's base
    assert not (target / apply.STAGING).exists()


def test_the_corpus_edits_are_mostly_outside_genies_changes():
    clean = [e for e in EDITS if not e.conflicts]
    assert len(EDITS) >= 20 and len(clean) >= 16


# ---------------------------------------------------------------------- the command


def genie_upgrade(target: Path, *args: str, **env: str):
    return run_genie("upgrade", str(target), "--no-smoke", *args, **env)


def test_a_conflict_is_listed_with_its_line_and_exits_1(genies, tmp_path):
    old, _new = genies
    seed = next(e for e in EDITS if e.name == "a changed seed default")
    target = edited_project(tmp_path, old, seed)
    done = genie_upgrade(target)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = (target / "config.py").read_text().splitlines()
    marker = lines.index("<<<<<<< yours") + 1
    assert f"config.py:{marker}" in done.stderr and done.stderr.count("\n") == 1
    assert "conflict     config.py:" in done.stdout


def test_a_dry_run_prints_the_plan_and_the_diff_and_writes_nothing(genies, tmp_path):
    old, _new = genies
    target = edited_project(tmp_path, old, EDITS[0])
    before = tree(target)
    done = genie_upgrade(target, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "replaced     dist_utils.py" in done.stdout
    assert "+    gc.freeze()" in done.stdout and "--- a/dist_utils.py" in done.stdout
    assert "Dry run: nothing written." in done.stdout
    assert tree(target) == before


def committed(target: Path, message: str) -> None:
    """``target`` made a git repository with everything in it committed."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=target, check=True)
    subprocess.run([*git, "add", "-A"], cwd=target, check=True)
    subprocess.run([*git, "commit", "-qm", message], cwd=target, check=True)


def test_uncommitted_changes_are_refused_unless_forced(genies, tmp_path):
    old, new = genies
    target = edited_project(tmp_path, old, None)
    committed(target, "genie")
    (target / "model.py").write_text((target / "model.py").read_text() + "# wip\n")
    before = tree(target)
    refused = genie_upgrade(target)
    assert refused.returncode == 2 and "uncommitted changes (model.py)" in refused.stderr
    assert "--force" in refused.stderr and refused.stderr.count("\n") == 1
    assert tree(target) == before
    forced = genie_upgrade(target, "--force")
    assert forced.returncode == 0, forced.stderr
    assert (target / "dist_utils.py").read_bytes() == new["dist_utils.py"]
    assert (target / "model.py").read_text().endswith("# wip\n")


@pytest.mark.parametrize(
    ("flag", "value"), [("--framework", "lightning"), ("--task", "cv")], ids=["framework", "task"]
)
def test_a_new_framework_or_task_is_refused_as_a_new_project(genies, tmp_path, flag, value):
    target = edited_project(tmp_path, genies[0], None)
    before = tree(target)
    done = genie_upgrade(target, flag, value)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert f"{flag} cannot change in an upgrade: that is a new project" in done.stderr
    assert "Traceback" not in done.stderr and tree(target) == before


def test_a_project_without_a_base_gets_genies_version_beside_each_changed_file(genies, tmp_path):
    old, new = genies
    loop = next(e for e in EDITS if e.name == "a line added to the training loop")
    target = edited_project(tmp_path, old, loop)
    (target / base.ARCHIVE).unlink()  # as genie wrote projects before it kept the base
    mine = (target / "train.py").read_bytes()
    done = genie_upgrade(target)
    assert done.returncode == 0, done.stderr
    assert "beside yours train.py.genie-new" in done.stdout
    assert (target / "train.py").read_bytes() == mine  # never merged without a base
    assert (target / "train.py.genie-new").read_bytes() == new["train.py"]
    assert (target / "dist_utils.py").read_bytes() == new["dist_utils.py"]  # untouched
    assert base.unpack((target / base.ARCHIVE).read_bytes()) == users(new)


def test_an_up_to_date_project_is_left_as_it_is(genies, tmp_path):
    target = edited_project(tmp_path, genies[1], EDITS[0])
    before = tree(target)
    done = genie_upgrade(target)
    assert done.returncode == 0 and "Every file is up to date." in done.stdout
    assert tree(target) == before


def start_paused(target: Path, point: str) -> subprocess.Popen:
    env = {**os.environ, "GENIE_TEST_PAUSE_AT": point, "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [*GENIE, "upgrade", str(target), "--no-smoke"],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("GENIE_TEST_PAUSED"):
            return proc
    raise AssertionError(f"genie upgrade never paused at {point}")


@pytest.mark.parametrize("point", ["staging", "rename", "replace"])
def test_a_killed_upgrade_leaves_the_old_project_or_the_next_run_finishes_it(
    genies, tmp_path, point
):
    old, new = genies
    edit = EDITS[1]
    target = edited_project(tmp_path, old, edit)
    committed(target, "as edited")
    before = users(tree(target))
    proc = start_paused(target, point)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    now = users(tree(target))
    staged = {p: d for p, d in now.items() if p.startswith((apply.STAGING, ".git/"))}
    if point == "staging":  # killed before the commit: the user's files as they were
        assert {p: d for p, d in now.items() if p not in staged} == {
            p: d for p, d in before.items() if not p.startswith(".git/")
        }
    if point != "staging":  # committed: nothing trains a half-upgraded project
        refused = run_genie("smoke", str(target))
        assert refused.returncode == 2 and "was interrupted; run genie upgrade" in refused.stderr
    # the half-written staging is not the user's change; the finished upgrade's are genie's
    done = genie_upgrade(target)
    assert done.returncode == 0, done.stderr
    result = {p: d for p, d in users(tree(target)).items() if not p.startswith(".git/")}
    assert result == edit.apply(users(new))
    assert ("interrupted" in done.stdout) is (point != "staging")


def test_the_readme_example_is_what_genie_upgrade_does(tmp_path):
    """The README's before/after: model.py changed, and a train.py comment genie changed."""
    readme = (ROOT / "README.md").read_text()
    example = readme[readme.index("$ genie upgrade my-proj") :].split("```")[0]
    spec = build_spec({"name": "my-proj"}, MACHINE)
    old = render_with(older_templates(tmp_path / "older"), spec)
    mine = users(old)
    for name in ("a changed model default", "the loop comment reworded"):
        mine = next(e for e in EDITS if e.name == name).apply(mine)
    target = tmp_path / "my-proj"
    write.write_project(target, {**old, **mine})
    done = genie_upgrade(target)
    assert done.returncode == 1
    plan = example.split("\n$ sed")[0]
    shown = [line for line in plan.splitlines() if line.startswith("  ")]
    assert shown == [line for line in done.stdout.splitlines() if line.startswith("  ")]
    error = next(line for line in example.splitlines() if line.startswith("error:"))
    assert done.stderr.startswith(error.removesuffix("..."))
    first, last = (int(n) for n in example.split("sed -n ")[1].split("p ")[0].split(","))
    conflict = example.split("\n<<<<<<< yours")[1].split("```")[0]
    lines = (target / "train.py").read_text().splitlines()
    assert "\n".join(lines[first - 1 : last]) == "<<<<<<< yours" + conflict.rstrip("\n")
    assert (target / "model.py").read_bytes() == mine["model.py"]


@pytest.mark.parametrize("kept", sorted((ROOT / "tests" / "upgrade_data").glob("*.tar.gz")))
def test_a_real_earlier_project_without_a_base_is_upgraded_by_its_hashes(kept, tmp_path):
    """Projects as earlier genies wrote them (kept as test data): the start of the upgrade
    work, and before the long-runs work. Without a base, a changed file is never merged."""
    files = base.unpack(kept.read_bytes())
    mine = files["config.py"].decode().replace("default=0.01", "default=0.05", 1).encode()
    target = tmp_path / "proj"
    write.write_project(target, {**files, "config.py": mine})
    done = genie_upgrade(target)
    assert done.returncode == 0, done.stderr
    today = render_with(None, build_spec(SPEC, MACHINE))
    result = tree(target)
    assert result["config.py"] == mine  # yours, as you left it
    config_changed = today["config.py"] != files["config.py"]
    assert ("config.py.genie-new" in result) is config_changed
    if config_changed:
        assert result["config.py.genie-new"] == today["config.py"]
    for path, data in users(today).items():
        if path != "config.py":
            assert result[path] == data, path  # untouched: replaced by today's
    assert base.unpack(result[base.ARCHIVE]) == users(today)


def test_an_upgrade_re_targets_nodes_and_scheduler_keeping_the_edits(genies, tmp_path):
    """Answers other than the framework and task change in place: the new launch files are
    added, the edits stay, .genie.yml records the new answers."""
    new_model = next(e for e in EDITS if e.name == "a new model in model.py")
    target = edited_project(tmp_path, genies[1], new_model)
    flags = ("--nodes", "2", "--master-addr", "node0.example", "--scheduler", "slurm")
    done = genie_upgrade(target, *flags)
    assert done.returncode == 0, done.stderr
    for added in ("launch/multi_node.sh", "launch/slurm.sbatch", "launch/preflight.py"):
        assert f"added        {added}" in done.stdout
        assert (target / added).is_file()
    assert os.access(target / "launch" / "slurm.sbatch", os.X_OK)
    answers = (target / ANSWERS_FILE).read_text()
    assert "nodes: 2\n" in answers and 'scheduler: "slurm"' in answers
    assert (target / "model.py").read_bytes() == new_model.apply(users(genies[1]))["model.py"]


def test_an_answer_not_given_again_keeps_the_projects_value(tmp_path):
    spec = build_spec({**SPEC, "epochs": 5, "seed": 7}, MACHINE)
    target = tmp_path / "proj"
    write.write_project(target, render_with(None, spec))
    done = genie_upgrade(target, "--precision", "bf16")
    assert done.returncode == 0, done.stderr
    answers = (target / ANSWERS_FILE).read_text()
    assert "epochs: 5\n" in answers and "seed: 7\n" in answers and 'precision: "bf16"' in answers
    helped = run_genie("upgrade", "--help").stdout
    assert "default: the project's answer, from .genie.yml" in " ".join(helped.split())
