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


def entry(seq: int, op: str = "all_reduce", size=(4096,), line: int = 142, created=None,
          timeout: float = 600.0) -> dict:  # fmt: skip
    """One collective, as torch's Flight Recorder records it (innermost frame first),
    entered at ``created`` seconds (by default one a second from 1000 s)."""
    at = 1000.0 + seq if created is None else created
    return {
        "time_created_ns": int(at * 1e9), "timeout_ms": int(timeout * 1000), "retired": True,
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
          host: str = "node0", reason: str = "told", error=None) -> None:  # fmt: skip
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
        stacks = {**heartbeat, "cwd": CWD, "reason": reason, "error": error,
                  "threads": [{"thread": "MainThread", "frames": frames}]}  # fmt: skip
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
    # torch's analyzer, on the same records (pg_config empty, as gloo leaves its names)
    assert out.stdout.splitlines()[2] == (
        "torch's own analyzer (torchfrtrace) agrees: collective #3: rank 3 never joined it"
    )


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
    assert out.stdout.splitlines()[2] == (
        "torch's own analyzer (torchfrtrace) agrees: collective #3: rank 1 collective type mismatch"
    )


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


TIMED_OUT = "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 6000ms"
# gloo's words where its side of the pair times out first (seen in CI on a dropped link)
PAIR_CLOSED = "RuntimeError: Application timeout caused pair closure"


@pytest.mark.parametrize("error", [TIMED_OUT, PAIR_CLOSED])
def test_every_rank_in_a_collective_that_failed_on_the_connection_is_the_network(tmp_path, error):
    folders = [tmp_path / f"node{r}" / "hang" for r in (0, 1)]
    for rank in (0, 1):
        write(folders[rank], rank, [entry(s) for s in (1, 2, 3)], where=("train.py", 224, "main"),
              host=f"node{rank}", reason="failed", error=error)  # fmt: skip
    out = explain(*folders)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == (
        "collective #3 (all_reduce of float32[4096], train.py:142): every rank came to it and "
        f"the connection between them (node0, node1) failed (rank 0: {error})"
    )
    assert "genie doctor --reach" in lines[1]
    # rank 1 still in #2 when the link went: it failed there itself, its data never came
    write(folders[1], 1, [entry(1), entry(2)], where=("train.py", 224, "main"), host="node1",
          reason="failed", error=TIMED_OUT)  # fmt: skip
    assert explain(*folders).stdout.startswith("collective #3 (all_reduce of float32[4096], "
                                               "train.py:142): every rank came to it")  # fmt: skip
    # the same records where the rank failed on an error of its own: not the network
    write(folders[0], 0, [entry(s) for s in (1, 2, 3)], where=("train.py", 224, "main"),
          host="node0", reason="failed", error="ValueError: shapes differ")  # fmt: skip
    write(folders[1], 1, [entry(s) for s in (1, 2, 3)], where=("train.py", 90, "fit"),
          host="node1")  # fmt: skip
    assert explain(*folders).returncode == 1


def test_a_rank_that_entered_only_after_the_timeout_came_too_late(tmp_path):
    # rank 1 slept 8 s in data preparation; rank 0 gave up after its 3 s timeout
    write(tmp_path, 0, [entry(1), entry(2, created=1010.0, timeout=3)],
          where=("train.py", 224, "main"), reason="failed", error=TIMED_OUT)  # fmt: skip
    write(tmp_path, 1, [entry(1), entry(2, created=1018.0, timeout=3)],
          where=("train.py", 224, "main"), reason="failed",
          error="RuntimeError: Connection closed by peer [10.77.0.1]:4021")  # fmt: skip
    out = explain(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == (
        "collective #2 (all_reduce of float32[4096], train.py:142): rank 0 entered it, rank 1 "
        "only 8 s later, past the 3 s timeout"
    )


def straggling(folder: Path, late: dict[int, tuple[float, ...]], steps=20,
               now: float = 1100.0) -> None:  # fmt: skip
    """Records asked of a running run (touch hang/ask): a collective a second, rank r
    entering collective s ``late[r][s % len(late[r])]`` seconds after the first; ranks
    0-1 on node0, the others on node1."""
    for rank, lags in late.items():
        entries = [entry(s, created=1000.0 + s + lags[s % len(lags)]) for s in range(1, steps + 1)]
        write(folder, rank, entries, where=("train.py", 90, "fit"), beat=(steps, "forward", now),
              host=f"node{int(rank >= 2 or len(late) == 2 and rank == 1)}", reason="asked")  # fmt: skip


def test_a_rank_the_others_wait_for_at_every_step_is_the_straggler(tmp_path):
    straggling(tmp_path, {0: (0.0,), 1: (0.3,)})
    out = explain(tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == (
        "straggler: rank 1 (node1) came last to 20 of the last 20 collectives, 0.30 s after "
        "the others on average; they waited for it 31% of the 19 s recorded"
    )
    assert "nvidia-smi" in lines[1]


def test_a_node_whose_ranks_take_turns_being_last_is_the_straggler(tmp_path):
    # node1's ranks 2 and 3: each last at every other collective
    straggling(tmp_path, {0: (0.0,), 1: (0.0,), 2: (0.3, 0.0), 3: (0.0, 0.3)})
    out = explain(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("straggler: ranks 2-3 (node1) came last to 20 of the last 20")


def test_ranks_of_the_only_node_taking_turns_being_last_are_no_straggler(tmp_path):
    """One node: its ranks are all the ranks, and all of them late is no one late (seen in
    CI: 'ranks 0-1 (vm) came last' for a healthy run on a loaded machine)."""
    for rank, lags in {0: (0.3, 0.0), 1: (0.0, 0.3)}.items():
        entries = [entry(s, created=1000.0 + s + lags[s % 2]) for s in range(1, 21)]
        write(tmp_path, rank, entries, where=("train.py", 90, "fit"), beat=(20, "forward", 1100.0),
              host="vm", reason="asked")  # fmt: skip
    out = explain(tmp_path)
    assert (out.returncode, out.stdout.splitlines()[0]) == (
        0, "every rank answered and none is behind or late: the run looks healthy"
    )  # fmt: skip


def test_a_running_run_in_step_is_healthy_and_a_stalled_one_is_not(tmp_path):
    straggling(tmp_path, {0: (0.0,), 1: (0.005, -0.005)})  # jitter, not a straggler
    out = explain(tmp_path)
    assert (out.returncode, out.stdout.splitlines()[0]) == (
        0, "every rank answered and none is behind or late: the run looks healthy"
    )  # fmt: skip
    # rank 1 a collective behind: a moment ahead is normal, a minute is a stuck rank
    for now, verdict in ((1025.0, "every rank answered"), (1100.0, "collective #20")):
        straggling(tmp_path, {0: (0.0,)}, now=now)
        write(tmp_path, 1, [entry(s) for s in range(1, 20)], where=("data.py", 5, "encode"),
              beat=(19, "data", now), host="node1", reason="asked")  # fmt: skip
        out = explain(tmp_path)
        assert out.returncode == 0 and out.stdout.startswith(verdict), out.stdout
    assert "rank 1 was in data.py:5 encode()" in out.stdout


def test_torch_s_analyzer_says_where_it_differs_or_why_it_could_not_run(tmp_path, monkeypatch):
    """fr_torch.opinion in-process: another collective than genie's verdict names is said,
    not agreed with; an analyzer that fails, or a torch without one, is said in one line;
    verdicts it has nothing to add to (a straggler, a dead rank) get no line."""
    from genie.smoke import fr_torch

    for rank in (0, 1):
        write(tmp_path, rank, [entry(1), entry(2)] if rank else [entry(1)], where=("a.py", 1, "f"))
    ranks = autopsy.load([tmp_path])
    said = fr_torch.opinion(ranks, "missing", 1, [0])
    assert said == "torch's own analyzer (torchfrtrace) says: collective #2: rank 0 never joined it"
    assert fr_torch.opinion(ranks, "slow", None, [1]) is None
    assert fr_torch.opinion(ranks, "dead", None, [1]) is None
    monkeypatch.setattr(fr_torch, "ANALYZER", "genie.no_such_module")
    said = fr_torch.opinion(ranks, "missing", 2, [0])
    assert said and said.startswith("torch's own analyzer (torchfrtrace) could not read these ")
    assert "No module named genie.no_such_module" in said
    monkeypatch.setattr(fr_torch, "available", lambda: False)
    said = fr_torch.opinion(ranks, "missing", 2, [0])
    assert said == (
        "torch's own analyzer (torchfrtrace) is not in the torch beside genie: genie's verdict "
        "alone"
    )


WORKERS = """worker pid 4242
Thread 0x00007eff937fe6c0 (most recent call first):
  File "/usr/lib/python3.11/multiprocessing/resource_sharer.py", line 138 in _serve

Current thread 0x00007f0057442b80 (most recent call first):
  File "/work/proj/data.py", line 43 in __getitem__
  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", line 52 in fetch
  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 375 in loop
"""


def test_a_rank_waiting_for_its_dataloader_worker_names_the_workers_line(tmp_path):
    """faulthandler's text, as the project's workers write it (their "Current thread" is
    the one the signal stopped; the others are the worker's helpers)."""
    write(tmp_path, 0, [entry(1), entry(2)], where=("train.py", 271, "fit"))
    write(tmp_path, 1, [entry(1)], where=("train.py", 252, "_micro_steps"),
          beat=(5, "data", 1000.0))  # fmt: skip
    (tmp_path / "workers-node0-rank1.txt").write_text(WORKERS)
    out = explain(tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].endswith(
        "rank 1 never did; rank 1 was in train.py:252 _micro_steps(), waiting for its DataLoader "
        "worker in data.py:43 __getitem__()"
    ), lines[0]
    at = lines.index("its DataLoader worker's stack (pid 4242, most recent call last):")
    assert lines[at + 1 : at + 4] == [
        "  /venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py:375 loop",
        "  /venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py:52 fetch",
        "  /work/proj/data.py:43 __getitem__",
    ]
