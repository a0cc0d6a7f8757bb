"""torch's own Flight Recorder analyzer (``torchfrtrace``, the module
torch.distributed.flight_recorder) on the records ``genie explain --hang`` reads, for the
verdicts it also makes: a rank missing from a collective, ranks that called different ones.
One line says what it found and whether that agrees with genie's verdict.

It runs in a process of its own (it imports torch) on copies of the records that genie has
read as plain values (it unpickles what it is given), named ``fr_RANK`` as it expects; gloo
leaves the records' process-group names empty, and the copies name them as the entries do."""

from __future__ import annotations

import importlib.util
import pickle
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from genie.i18n import _
from genie.smoke.hang_records import Rank, ranks_text

ANALYZER = "torch.distributed.flight_recorder.fr_trace"
FIRST = re.compile(r"^(Not all ranks joining collective,|Collective|Input/output mismatch in the "
                   r"collective) sequence number: (\d+)", re.M)  # fmt: skip
MISSING = re.compile(r"^missing ranks: \{([\d, ]*)\}", re.M)
CULPRIT = re.compile(r"Culprit rank (\d+); Error type: (\w+)")


def _name() -> str:
    return _("torch's own analyzer (torchfrtrace)")


def available() -> bool:
    """Whether the torch beside genie has the analyzer (found without importing torch)."""
    spec = importlib.util.find_spec("torch")
    places = (spec.submodule_search_locations if spec else None) or []
    return any((Path(p) / "distributed/flight_recorder/fr_trace.py").is_file() for p in places)


def opinion(ranks: dict[int, Rank], kind: str, seq: int | None, culprits: list[int]) -> str | None:
    """The analyzer's first finding in one line, or why it could not say; None where it has
    nothing to add (genie's verdict is not about a missing or mismatched collective)."""
    if kind not in ("missing", "mismatch", "unknown") or not any(r.trace for r in ranks.values()):
        return None
    if not available():
        return _("{name} is not in the torch beside genie: genie's verdict alone").format(
            name=_name()
        )
    with tempfile.TemporaryDirectory(prefix="genie-frtrace-") as folder:
        _copies(ranks, Path(folder))
        try:
            done = subprocess.run([sys.executable, "-m", ANALYZER, folder, "-p", "fr_"],
                                  capture_output=True, text=True, timeout=300)  # fmt: skip
        except subprocess.TimeoutExpired:
            done = subprocess.CompletedProcess([], 1, "", "no answer within 300 s")
    said = done.stdout + done.stderr
    found = FIRST.search(said)
    if done.returncode != 0 or (not found and "Traceback" in said):
        why = (said.strip().splitlines() or ["exit status " + str(done.returncode)])[-1]
        return _("{name} could not read these records: {why}").format(name=_name(), why=why)
    if not found:
        return _("{name} finds no collective that a rank missed or called differently").format(
            name=_name()
        )
    theirs = int(found[2])
    rest = said[found.end() :]
    if found[1].startswith("Not all"):
        missing = MISSING.search(rest)
        at = sorted(int(n) for n in missing[1].split(",") if n.strip()) if missing else []
        what = _("collective #{seq}: {ranks} never joined it").format(
            seq=theirs, ranks=ranks_text(at)
        )
    else:
        errors = sorted({(int(r), e) for r, e in CULPRIT.findall(rest)})
        at = [r for r, _e in errors]
        what = _("collective #{seq}: {errors}").format(
            seq=theirs,
            errors=", ".join(f"{ranks_text([r])} {e.lower().replace('_', ' ')}" for r, e in errors)
            or found[0],
        )
    agrees = theirs == seq and set(at) <= set(culprits) and kind != "unknown"
    said_by = _("{name} agrees: {what}") if agrees else _("{name} says: {what}")
    return said_by.format(name=_name(), what=what)


def _copies(ranks: dict[int, Rank], folder: Path) -> None:
    world = sorted(ranks)
    for n, rank in ranks.items():
        if not rank.trace:
            continue
        trace = dict(rank.trace)
        configs = dict(trace.get("pg_config") or {})
        groups = {tuple(e["process_group"]) for e in trace.get("entries", [])}
        spans = {str(c.get("ranks")) for c in configs.values() if c.get("ranks")}
        members = spans.pop() if len(spans) == 1 else str(world)
        for name, desc in groups:
            if name not in configs:
                configs[name] = {"name": name, "desc": desc, "ranks": members}
        trace["pg_config"] = {k: c for k, c in configs.items() if k}
        (folder / f"fr_{n}").write_bytes(pickle.dumps(trace))
