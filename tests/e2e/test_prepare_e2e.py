"""Data preparation outside the collective timeout (issue 45): a preparation slower than
--dist-timeout completes and training starts, every torchrun framework; a preparation
killed in the middle of tokenizing resumes from the shards it finished; --prepare-only
prepares in one process with no process group."""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from .conftest import CPU_ENV, THIS_PYTHON, generate

CPUS = ("--nproc-per-node", "2", "--gpus-per-node", "0")
# 9 s for any collective; the preparation takes 20
SLOW = ("--smoke", "--dist-timeout", "0.15")
# the end of the custom task's prepare(): a download or a tokenization, slower than that
SLOW_PREPARE = "    __import__('time').sleep(20)\n\n\n"


def run(project: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(
        args, cwd=project, env={**os.environ, **CPU_ENV, **THIS_PYTHON, **(env or {})},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    done.stdout += done.stderr
    return done


def insert(path: Path, anchor: str, code: str) -> None:
    """``code`` as whole lines before the one line that starts with ``anchor``."""
    source = path.read_text()
    assert source.count("\n" + anchor) == 1, anchor
    path.write_text(source.replace("\n" + anchor, "\n" + code + anchor))


FRAMEWORKS = ("ddp", "lightning", "hf")


@pytest.fixture(scope="module")
def slow_preparations(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Each framework's run of a preparation slower than the collective timeout, the three at
    once (most of each is the preparation's wait)."""
    root = tmp_path_factory.mktemp("slow-prepare")

    def slow(framework: str) -> subprocess.CompletedProcess:
        project = generate(root / framework, "--framework", framework, *CPUS)
        insert(project / "data.py", "def prepared_dir(", SLOW_PREPARE)
        return run(project, "bash", "launch/single_node.sh", *SLOW)

    for framework in FRAMEWORKS:
        (root / framework).mkdir()
    with ThreadPoolExecutor(len(FRAMEWORKS)) as pool:
        return dict(zip(FRAMEWORKS, pool.map(slow, FRAMEWORKS), strict=True))


@pytest.mark.xdist_group("slow-prepare")  # one worker runs the fixture's three at once
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_preparation_slower_than_the_collective_timeout_completes(slow_preparations, framework):
    done = slow_preparations[framework]
    assert done.returncode == 0, done.stdout[-3000:]
    assert "GENIE_SMOKE" in done.stdout


def test_a_preparation_killed_while_tokenizing_resumes_from_its_finished_shards(tmp_path):
    project = generate(tmp_path, "--task", "nlp", *CPUS)
    data = project / "data.py"
    # 8 texts a shard: the smoke set (36 texts for one process) is 5 shards
    data.write_text(data.read_text().replace("SHARD_ROWS = 100_000", "SHARD_ROWS = 8", 1))
    insert(data, '        (partial / f"{name}.done").touch()',
           '        if index == 3 and os.environ.get("DIE_AT_SHARD_4"):\n'
           "            os._exit(9)  # killed after tokenizing shard 4, before marking it\n")  # fmt: skip
    prepare = ("python", "train.py", "--prepare-only", "--smoke")
    killed = run(project, *prepare, env={"DIE_AT_SHARD_4": "1"})
    assert killed.returncode == 9, killed.stdout[-3000:]
    partial = next((project / "checkpoints" / "smoke" / "tokenized").glob(".partial-*"))
    assert sorted(p.name for p in partial.glob("*.done")) == [
        "shard-00000.done", "shard-00001.done", "shard-00002.done"
    ]  # fmt: skip
    again = run(project, *prepare)
    assert again.returncode == 0, again.stdout[-3000:]
    said = [line for line in again.stdout.splitlines() if "tokenizing shard" in line]
    assert [line.split("tokenizing ")[1].split(":")[0] for line in said] == [
        "shard 4/5", "shard 5/5"
    ], again.stdout  # fmt: skip
    assert "data prepared in checkpoints/smoke/" in again.stdout
    fresh = run(project, *prepare, "--checkpoint-dir", "fresh")
    assert fresh.returncode == 0, fresh.stdout[-3000:]
    from datasets import Dataset, concatenate_datasets

    def rows(folder: Path) -> list:
        [target] = (folder / "tokenized").iterdir()
        parts = [Dataset.from_file(str(p)) for p in sorted(target.glob("*.arrow"))]
        return concatenate_datasets(parts).to_list()

    resumed, whole = rows(project / "checkpoints" / "smoke"), rows(project / "fresh")
    assert len(resumed) == 36 and resumed == whole
    # and the project trains on what was prepared (under torchrun: two ranks)
    trained = run(project, "bash", "launch/single_node.sh", "--smoke")
    assert trained.returncode == 0 and "GENIE_SMOKE" in trained.stdout, trained.stdout[-3000:]


def test_an_llm_preparation_killed_mid_shard_keeps_its_finished_shards(tmp_path):
    """The llm task's packed tokens (chat: with the file of trained tokens): killed while
    writing its fourth shard, the next start tokenizes only the fourth on, and the
    result is the uninterrupted preparation's, byte for byte."""
    project = generate(tmp_path, "--task", "llm", *CPUS)
    data = project / "data.py"
    data.write_text(data.read_text().replace("SHARD_ROWS = 100_000", "SHARD_ROWS = 8", 1))
    insert(data, '        os.replace(writing, folder / f"shard-{index:05d}.{name}")',
           '        if index == 3 and column == "input_ids" and os.environ.get("DIE"):\n'
           "            os._exit(9)  # killed with shard 4's tokens half done\n")  # fmt: skip
    prepare = ("python", "train.py", "--prepare-only", "--smoke", "--format", "chat")
    killed = run(project, *prepare, env={"DIE": "1"})
    assert killed.returncode == 9, killed.stdout[-3000:]
    done = [line.split("tokenized ")[1] for line in killed.stdout.splitlines()
            if "tokenized shard" in line]  # fmt: skip
    shards = int(done[0].split("/")[1])
    assert done == [f"shard {i}/{shards}" for i in (1, 2, 3)] and shards > 4
    again = run(project, *prepare)
    assert again.returncode == 0, again.stdout[-3000:]
    redone = [line.split("tokenized ")[1] for line in again.stdout.splitlines()
              if "tokenized shard" in line]  # fmt: skip
    assert redone == [f"shard {i}/{shards}" for i in range(4, shards + 1)]
    fresh = run(project, *prepare, "--checkpoint-dir", "fresh")
    assert fresh.returncode == 0, fresh.stdout[-3000:]
    [resumed] = (project / "checkpoints" / "smoke" / "tokens").iterdir()
    [whole] = (project / "fresh" / "tokens").iterdir()
    for name in ("tokens.bin", "trained.bin", "meta.json"):
        assert (resumed / name).read_bytes() == (whole / name).read_bytes(), name
    assert not list(resumed.glob("shard-*"))
