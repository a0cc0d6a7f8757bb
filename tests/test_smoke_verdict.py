"""The smoke verdict survives however the report line arrives: torchrun's prefixes glued on,
progress bars' carriage returns, a line read in two pieces, a busy machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from genie import contract, smoke, smoke_process
from genie.spec import build_spec

GOOD = {
    "world_size": 2, "backend": "gloo", "device": "cpu", "precision": "fp32", "steps": 16,
    "first_loss": 2.3, "last_loss": 2.1, "params_in_sync": True, "val_accuracy": 0.5,
    "checkpoint_loads": True,
}  # fmt: skip
REPORT = contract.MARKER + json.dumps(GOOD)


@pytest.fixture
def cpu_plan(cpu_machine):
    return smoke.plan(build_spec({"name": "p"}, cpu_machine), cpu_machine, Path("/ck"))


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
    reports = smoke.parse_reports(lines)
    assert reports == [GOOD]
    assert smoke.judge(cpu_plan, 0, reports) == []


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
    reports = smoke.parse_reports(lines)
    assert {"unparsable"} == set(reports[0])
    problems = smoke.judge(cpu_plan, 0, reports)
    assert problems, reports


def test_a_truncated_report_is_named_as_such(cpu_plan):
    problems = smoke.judge(cpu_plan, 0, smoke.parse_reports([REPORT[:-5] + "\n"]))
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
    assert smoke.judge(cpu_plan, 0, smoke.parse_reports(out.lines)) == []
