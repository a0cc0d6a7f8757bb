"""genie upgrade, then the real smoke test it runs (2 CPU processes, gloo): the corpus's edits
upgraded from an older genie, a project from a real earlier genie, and an edited FSDP project
moved from torch 2.4 to 2.14."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from genie.detect import Machine
from genie.generate import archive, write
from genie.spec import build_spec

from ..conftest import ROOT, calls, imported_names, project_code, run_genie, tree
from ..test_generated_rules import LOCAL_DEVICES, stranded_comments
from ..upgrade_corpus import EDITS, SPEC, older_templates, render_with
from .conftest import CPU_ENV

pytestmark = pytest.mark.e2e
MACHINE = Machine(gpus=0, torch="2.14.1", python="3.11", hostname="node0")
EARLIER = ROOT / "tests" / "upgrade_data" / "genie-f9c2434-before-long-runs.tar.gz"


def on_disk(target: Path, files: dict[str, bytes]) -> Path:
    """``files`` written as the user's project now is (modes as genie writes them)."""
    write.write_project(target, files)
    return target


def upgrade_and_smoke(target: Path, *flags: str) -> str:
    done = run_genie("upgrade", str(target), *flags, **CPU_ENV)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "verdict │ PASS" in out and "Smoke test: a few real training steps" in out
    return out


def test_every_edit_outside_genies_changes_upgrades_together_and_trains(tmp_path):
    spec = build_spec(SPEC, MACHINE)
    old = render_with(older_templates(tmp_path / "older"), spec)
    records = {p: d for p, d in old.items() if p in (".genie.yml", archive.ARCHIVE)}
    mine = {p: d for p, d in old.items() if p not in records}
    clean = [e for e in EDITS if not e.conflicts and e.name != "a deleted file genie changed"]
    for edit in clean:
        mine = edit.apply(mine)
    target = on_disk(tmp_path / "proj", {**mine, **records})
    out = upgrade_and_smoke(target)
    assert "conflict" not in out
    new = render_with(None, spec)
    expected = {p: d for p, d in new.items() if p not in records}
    for edit in clean:
        expected = edit.apply(expected)
    assert {p: d for p, d in tree(target).items() if p not in records} == expected


def test_a_project_from_a_real_earlier_genie_keeps_its_edits_and_trains(tmp_path):
    """Kept as test data: the default project as genie wrote it before the long-runs work
    (f9c2434), with the base archive that genie would have kept."""
    files = archive.unpack(EARLIER.read_bytes())
    files[archive.ARCHIVE] = archive.pack({p: d for p, d in files.items() if p != ".genie.yml"})
    edits = [
        ("model.py", "hidden: int = 256", "hidden: int = 512"),
        ("config.py", '"--weight-decay", type=float, default=0.01', '"--weight-decay", type=float, default=0.05'),  # fmt: skip
        ("data.py", "NUM_SAMPLES = 8192", "NUM_SAMPLES = 4096"),
    ]
    for path, old, new in edits:
        assert files[path].decode().count(old) == 1
        files[path] = files[path].decode().replace(old, new).encode()
    target = on_disk(tmp_path / "proj", files)
    out = upgrade_and_smoke(target)
    assert "merged       config.py" in out and "replaced     train.py" in out
    for path, _old, new in edits:
        assert new in (target / path).read_text(), path
    today = render_with(None, build_spec(SPEC, MACHINE))
    assert (target / "train.py").read_bytes() == today["train.py"]


def test_an_edited_fsdp_project_moves_from_torch_2_4_to_2_14_and_trains(tmp_path):
    raw = {**SPEC, "strategy": "fsdp", "torch": "2.4", "gpus_per_node": 8}  # FSDP1 needs GPUs
    files = render_with(None, build_spec(raw, MACHINE))
    assert b"FullyShardedDataParallel" in files["fsdp.py"]  # FSDP1 on torch 2.4
    mine = files["model.py"].decode().replace("hidden: int = 256", "hidden: int = 384")
    target = on_disk(tmp_path / "proj", {**files, "model.py": mine.encode()})
    upgrade_and_smoke(target, "--torch", "2.14")
    now = tree(target)
    assert "hidden: int = 384" in now["model.py"].decode()
    assert 'torch: "2.14"' in now[".genie.yml"].decode()
    assert "torch>=2.14," in now["requirements-torch.txt"].decode()
    source = project_code(now)
    imports = imported_names(source)
    assert "torch.distributed.fsdp.fully_shard" in imports  # FSDP2 from torch 2.6
    assert "torch.distributed.fsdp.FullyShardedDataParallel" not in imports
    assert "torch.amp.GradScaler" in source and "torch.cuda.amp" not in source
    # the rules every generated project keeps (tests/test_generated_rules.py) hold after it
    for path, data in now.items():
        if path.endswith(".py"):
            text = data.decode()
            compile(text, path, "exec")
            assert stranded_comments(text) == [], path
            for call in calls(ast.parse(text), "torch.load"):
                keywords = {k.arg: ast.unparse(k.value) for k in call.keywords}
                assert keywords.get("map_location") in LOCAL_DEVICES, f"{path}:{call.lineno}"
