"""``genie explain --hang``: records written as a project's hang.py writes them (the Flight
Recorder's pickle layout as torch 2.14 dumps it, stacks, heartbeats), read back into one
verdict line; bad input in one line."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from genie.smoke import autopsy

from .conftest import run_genie

CWD = "/work/proj"


def entry(seq: int, op: str = "all_reduce", size=(4096,), line: int = 142) -> dict:
    """One collective, as torch's Flight Recorder records it (innermost frame first)."""
    return {
        "record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"),
        "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq, "is_p2p": False,
        "profiling_name": f"gloo:{op}", "input_sizes": [list(size)], "input_dtypes": ["Float"],
        "output_sizes": [list(size)], "output_dtypes": ["Float"], "state": "scheduled",
        "frames": [
            {"filename": "/venv/lib/python3.11/site-packages/torch/distributed/c10d.py",
             "line": 3906, "name": op},
            {"filename": f"{CWD}/train.py", "line": line, "name": "_micro_steps"},
            {"filename": f"{CWD}/train.py", "line": 400, "name": "main"},
        ],
    }  # fmt: skip


def write(folder: Path, rank: int, entries=None, where=None, beat=(5, "forward", 1000.0),
          host: str = "node0") -> None:  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    if entries is not None:
        trace = {"version": "2.10", "pg_config": {}, "entries": entries}
        (folder / f"fr-{host}-rank{rank}").write_bytes(pickle.dumps(trace))
    step, phase, time = beat
    heartbeat = {"rank": rank, "host": host, "step": step, "phase": phase, "time": time}
    (folder / f"heartbeat-{host}-rank{rank}.json").write_text(json.dumps(heartbeat))
    if where is not None:
        frames = [[f"{CWD}/train.py", 400, "main"], [f"{CWD}/{where[0]}", where[1], where[2]],
                  ["/usr/lib/python3.11/threading.py", 320, "wait"]]  # fmt: skip
        stacks = {**heartbeat, "cwd": CWD, "threads": [{"thread": "MainThread", "frames": frames}]}
        (folder / f"stacks-{host}-rank{rank}.json").write_text(json.dumps(stacks))


def explain(*folders: Path, lang: str = "en"):
    return run_genie("explain", *[a for f in folders for a in ("--hang", str(f))], LANGUAGE=lang)


def test_a_rank_that_never_entered_is_named_with_the_collective_and_its_line(tmp_path):
    # ranks 0-2 entered #3 (on two nodes); rank 3 was still tokenizing
    node0, node1 = tmp_path / "node0" / "hang", tmp_path / "node1" / "hang"
    for rank in (0, 1):
        write(
            node0, rank, [entry(1), entry(2), entry(3, size=(7,))], where=("train.py", 271, "fit")
        )
    write(node1, 2, [entry(1), entry(2), entry(3, size=(7,))], host="node1")
    write(node1, 3, [entry(1), entry(2)], where=("data.py", 183, "encode"), host="node1")
    out = explain(node0, node1)
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert first == (
        "collective #3 (all_reduce of float32[7], train.py:142): ranks 0-2 entered it, "
        "rank 3 never did; rank 3 was in data.py:183 encode()"
    )
    assert "fix: " in out.stdout and "rank 3's stack (node1" in out.stdout
    assert "rank 3 (node1): step 5, forward" in out.stdout


def test_ranks_that_called_different_collectives_are_named_with_both_lines(tmp_path):
    # the if-rank-0 bug: rank 1 all-gathers where the others all-reduce
    for rank in (0, 2, 3):
        write(tmp_path, rank, [entry(1), entry(2), entry(3)], where=("train.py", 9, "x"))
    write(tmp_path, 1, [entry(1), entry(2), entry(3, op="all_gather", line=77)])
    out = explain(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == (
        "collective #3 does not match: rank 1 called all_gather of float32[4096], "
        "train.py:77, ranks 0, 2-3 called all_reduce of float32[4096], train.py:142"
    )
    assert "rank-dependent branch" in out.stdout


def test_a_rank_whose_process_ended_is_named_dead_from_its_heartbeat(tmp_path):
    write(
        tmp_path,
        0,
        [entry(1), entry(2)],
        where=("train.py", 142, "fit"),
        beat=(9, "backward", 1030.0),
    )
    write(tmp_path, 1, None, beat=(9, "forward", 1010.0))  # killed: no records, a stale beat
    out = explain(tmp_path)
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert first == (
        "rank 1 had ended: its last heartbeat was at step 9 (forward), 20 s before the "
        "others' last, and it wrote no stacks when asked (or it is stuck in native code "
        "that holds Python's lock)"
    )


def test_records_that_show_nothing_wrong_exit_1(tmp_path):
    for rank in (0, 1):
        write(tmp_path, rank, [entry(1), entry(2)], where=("train.py", 1, "x"))
    out = explain(tmp_path)
    assert out.returncode == 1
    assert out.stdout.splitlines()[0] == "the records show no collective that some rank missed"


def test_the_verdict_in_chinese(tmp_path):
    write(tmp_path, 0, [entry(1), entry(2)], where=("train.py", 1, "x"))
    write(tmp_path, 1, [entry(1)], where=("data.py", 5, "encode"))
    out = explain(tmp_path, lang="zh")
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert "#2" in first and "rank 1" in first and "data.py:5 encode()" in first
    assert "从未" in first


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda d: None, "no hang records in"),
        (lambda d: (d / "fr-h-rank0").write_bytes(pickle.dumps(Path("x"))), "cannot read"),
        (lambda d: (d / "stacks-h-rank0.json").write_text("{"), "cannot read"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, make, said):
    make(tmp_path)
    out = explain(tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    [line] = out.stderr.strip().splitlines()
    assert said in line


def test_no_folder_and_no_log_is_a_usage_error(tmp_path):
    assert explain(tmp_path / "missing").returncode == 2
    out = run_genie("explain")
    assert out.returncode == 2 and "--hang" in out.stderr


def test_rank_lists_are_ranges():
    assert autopsy.ranks_text([0, 1, 2, 5, 7, 8]) == "ranks 0-2, 5, 7-8"
    assert autopsy.ranks_text([3]) == "rank 3"


def test_a_heartbeat_that_stopped_long_before_the_others_is_an_ended_rank(tmp_path):
    # nobody was asked (no stacks anywhere): only a heartbeat 3 beats older than the newest
    write(tmp_path, 0, [entry(1)], beat=(40, "data", 1100.0))
    write(tmp_path, 1, [entry(1)], beat=(12, "backward", 1100.0 - autopsy.LATE - 1))
    out = explain(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("rank 1 had ended: its last heartbeat was at step 12 (backward)")
    write(tmp_path, 1, [entry(1)], beat=(12, "backward", 1100.0 - autopsy.LATE + 1))
    assert explain(tmp_path).returncode == 1  # a heartbeat within 3 beats: alive


def test_without_stacks_a_rank_with_no_record_is_behind_not_ended(tmp_path):
    # NCCL: the watchdog dumped ranks 0-1 and ended them; rank 2 wrote no collectives
    for rank in (0, 1):
        write(tmp_path, rank, [entry(1), entry(2)], beat=(7, "backward", 1000.0))
    write(tmp_path, 2, None, beat=(7, "data", 1000.0))
    out = explain(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == (
        "collective #2 (all_reduce of float32[4096], train.py:142): ranks 0-1 entered it, "
        "rank 2 never did"
    )
