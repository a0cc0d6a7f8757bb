"""The smoke verdict survives however the report line arrives: torchrun's prefixes glued on,
progress bars' carriage returns, a line read in two pieces, a busy machine."""

from __future__ import annotations

import json
import sys

import pytest

from genie import contract
from genie.smoke import process as smoke_process
from genie.smoke import verdict

from .conftest import GOOD_REPORT

REPORT = contract.MARKER + json.dumps(GOOD_REPORT)


def _split(at: int) -> list[str]:
    """The report read by torchrun in two pieces, each printed with its prefix."""
    return [f"[default0]:{REPORT[:at]}\n", f"[default0]:{REPORT[at:]}\n"]


INTERLEAVINGS = {
    "plain": [REPORT + "\n"],
    "tee prefix": [f"[default0]:{REPORT}\n"],
    "next prefix glued after": [f"[default0]:{REPORT}[default0]:\n", "[default1]:bye\n"],
    "other rank's text glued after": [f"[default0]:{REPORT}[default1]:epoch 2 loss 1.0\n"],
    "no newline at the end of output": [f"[default0]:{REPORT}"],
    "tqdm carriage return before": [f"[default0]:step 3/4 75%|###  |\r{REPORT}\n"],
    "tqdm and prefix before": [f"[default1]:100%|####|\r[default0]:{REPORT}\n"],
    "windows line end": [f"[default0]:{REPORT}\r\n"],
    "noise lines around": ["[default1]:warn\n", f"[default0]:{REPORT}\n", "[default1]:x\n"],
    "split inside the marker's json": _split(len(contract.MARKER) + 10),
    "split right after the marker": _split(len(contract.MARKER)),
    "split before the closing brace": _split(len(REPORT) - 1),
    "split with other rank in between": [
        f"[default0]:{REPORT[:40]}\n", f"[default0]:{REPORT[40:]}[default1]:tail\n"
    ],
}  # fmt: skip


@pytest.mark.parametrize("lines", INTERLEAVINGS.values(), ids=INTERLEAVINGS.keys())
def test_a_good_report_passes_however_it_is_interleaved(cpu_plan, lines):
    reports = verdict.parse_reports(lines)
    assert reports == [GOOD_REPORT]
    assert verdict.judge(cpu_plan, 0, reports) == []


def test_the_convert_probes_report_is_read_the_same_way():
    """genie convert's check reads its probe's line with the same reader: a line glued
    to the next prefix (seen in a CI run: '...}[default0]:') is still one report."""
    from genie.convert import probe

    report = {"world_size": 2, "last_loss": 0.69}
    line = f"[default0]:{probe.MARKER}{json.dumps(report)}[default0]:\n"
    assert verdict.parse_reports([line], probe.MARKER) == [report]
    assert verdict.parse_reports([line]) == []  # a smoke report's marker is another


@pytest.mark.parametrize(
    "lines",
    [
        [f"[default0]:{REPORT[:-1]}\n"],  # cut short: the closing brace never came
        [f"[default0]:{REPORT[:30]}\n", "[default1]:something else\n"],
        [f"[default0]:{contract.MARKER}not json\n"],
        [f"[default0]:{contract.MARKER}[1, 2]\n"],  # JSON, but not an object
        [f"[default0]:{REPORT[:30]}\n", f"[default0]:{REPORT}\n"],  # a partial, then a whole
    ],
    ids=["truncated", "truncated-then-other", "not-json", "json-list", "partial-then-whole"],
)
def test_a_partial_line_is_never_taken_for_a_report(cpu_plan, lines):
    reports = verdict.parse_reports(lines)
    assert {"unparsable"} == set(reports[0])
    problems = verdict.judge(cpu_plan, 0, reports)
    assert problems, reports


def test_a_truncated_report_is_named_as_such(cpu_plan):
    problems = verdict.judge(cpu_plan, 0, verdict.parse_reports([REPORT[:-5] + "\n"]))
    assert any("not one complete JSON object" in p for p in problems), problems


WRITER = """
import sys, time
sys.stdout.write("[default0]:" + sys.argv[1][:25]); sys.stdout.flush(); time.sleep(0.3)
sys.stdout.write(sys.argv[1][25:] + "[default0]:"); sys.stdout.flush(); time.sleep(0.3)
sys.stdout.write("after\\n"); sys.stdout.flush()
"""


def test_the_reader_never_splits_a_line_written_in_pieces(tmp_path, cpu_plan):
    out = smoke_process.execute(
        [sys.executable, "-c", WRITER, REPORT], tmp_path, {"PATH": "/usr/bin:/bin"}, 30
    )
    assert out.returncode == 0
    assert out.lines == [f"[default0]:{REPORT}[default0]:after\n"]
    assert verdict.judge(cpu_plan, 0, verdict.parse_reports(out.lines)) == []


ROOT_CAUSE = """[default1]:GENIE_FAULT raise on rank 1 at step 1
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_10:40:00
  host      : node0
  rank      : {rank} (local_rank: {rank})
  exitcode  : {code} (pid: 1234)
  error_file: {error_file}
  traceback : {traceback}
============================================================
"""


@pytest.mark.parametrize(
    ("rank", "code", "traceback", "named"),
    [
        (1, 1, "Traceback (most recent call last):\n    File \"x.py\", line 1, in f\n"
         "  RuntimeError: boom", "rank 1 failed first: RuntimeError: boom"),
        (0, 3, "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
         "rank 0 failed first: exit code 3"),
        (1, -9, "Signal 9 (SIGKILL) received by PID 1234", "rank 1 failed first: killed by signal 9"),
    ],
)  # fmt: skip
def test_the_rank_torchrun_saw_fail_first_is_named(rank, code, traceback, named):
    output = ROOT_CAUSE.format(rank=rank, code=code, error_file="/tmp/e.json", traceback=traceback)
    assert verdict.failed_rank(output) == named


def test_a_hung_rank_is_told_from_the_ranks_waiting_for_it():
    dump = """[default0]:Thread 0x01 (most recent call first):
[default0]:  File "/usr/lib/python3.11/threading.py", line 331 in wait
[default0]:  File "/p/tracking.py", line 10 in loop
[default0]:Current thread 0x02 (most recent call first):
[default0]:  File "/v/site-packages/torch/autograd/graph.py", line 841 in _engine_run_backward
[default0]:  File "/p/train.py", line 107 in train_epoch
[default1]:Current thread 0x03 (most recent call first):
[default1]:  File "/p/smoke_check.py", line 59 in fault
[default1]:  File "/v/site-packages/torch/nn/modules/module.py", line 1826 in inner
"""
    assert (
        verdict.hung_rank(dump)
        == "rank 1 hung outside any collective, at smoke_check.py:59 in fault"
    )
    assert verdict.hung_rank("[default0]:no dump\n") is None
