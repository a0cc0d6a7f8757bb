"""The smoke verdict: find the report line in a run's output, whatever interleaves with it,
and judge it against the plan. Pure: text and numbers in, problems out."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from genie import contract
from genie.i18n import _, ngettext
from genie.registry import SHARDED
from genie.smoke.torchrun_output import failures, main_stacks, unprefix

if TYPE_CHECKING:
    from genie.smoke.plan import SmokePlan

_CONTINUATION_LINES = 8  # how far a report split across reads may spread


def parse_reports(lines: Sequence[str], marker: str = contract.MARKER) -> list[dict[str, Any]]:
    """Every report (``marker`` + JSON) in the output, however it arrived.

    The marker may sit anywhere in a line (after torchrun's ``[default0]:`` prefix, or after
    a progress bar's carriage return); exactly one JSON object is decoded after it and
    whatever follows (another rank's prefix glued on) is ignored. When torchrun read the
    report in two pieces, the next lines (their prefix stripped) complete it. A marker
    whose JSON never completes is reported as unparsable, never as a report.
    """
    reports = []
    decoder = json.JSONDecoder()
    for i, line in enumerate(lines):
        start = 0
        while (at := line.find(marker, start)) >= 0:
            start = at + len(marker)
            text = line[start:].rstrip("\r\n")
            data = _decode(decoder, text)
            for more in lines[i + 1 : i + 1 + _CONTINUATION_LINES]:
                if data is not None or marker in more:
                    break
                text += unprefix(more.rstrip("\r\n"))[1]
                data = _decode(decoder, text)
            if data is None:
                reports.append({"unparsable": line.strip()})
                continue
            reports.append(data)
    return reports


def _decode(decoder: json.JSONDecoder, text: str) -> dict[str, Any] | None:
    """The one JSON object at the start of ``text`` (what follows is ignored), or None."""
    try:
        data, _end = decoder.raw_decode(text.lstrip())
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def judge(p: SmokePlan, returncode: int | None, reports: list[dict[str, Any]]) -> list[str]:
    """Why the run failed; an empty list means it passed."""
    problems = []
    if returncode != 0:
        problems.append(_("torchrun exited with {rc}").format(rc=returncode))
    if not reports:
        problems.append(_("no {m}line: training did not finish").format(m=contract.MARKER))
        return problems
    if len(reports) > 1:
        problems.append(
            _("{n} report lines; only global rank 0 may print one").format(n=len(reports))
        )
    report = reports[-1]
    if "unparsable" in report:
        problems.append(
            _("the {m}line is not one complete JSON object: {line}").format(
                m=contract.MARKER, line=str(report["unparsable"])[:200]
            )
        )
        return problems
    missing = [k for k in contract.REPORT_KEYS if k not in report]
    if missing:
        problems.append(_("report lacks {keys}").format(keys=", ".join(missing)))
        return problems
    return [
        *problems,
        *_launched(p, report),
        *_trained(report),
        *_weights(p, report),
        *_results(p, report),
    ]


def _launched(p: SmokePlan, report: dict[str, Any]) -> list[str]:
    """What trained is what was launched: world size and backend."""
    problems = []
    if report["world_size"] != p.nproc:
        problems.append(
            _("trained with world size {got}, launched {want}").format(
                got=report["world_size"], want=p.nproc
            )
        )
    if report["backend"] != p.backend:
        problems.append(
            _("backend {got}, expected {want}").format(got=report["backend"], want=p.backend)
        )
    return problems


def _trained(report: dict[str, Any]) -> list[str]:
    """Steps were taken, the losses are finite, and the model learned: the last epoch's
    mean loss is well below the first step's loss."""
    problems = []
    if not isinstance(report["steps"], int) or report["steps"] < 1:
        problems.append(_("no optimizer step was taken"))
    finite = True
    for key in ("first_loss", "last_loss", "epoch_loss"):
        value = report[key]
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            problems.append(_("{key} is not finite: {v}").format(key=key, v=value))
            finite = False
    if finite and report["epoch_loss"] > contract.LEARNED * report["first_loss"]:
        problems.append(
            _(
                "the model did not learn: the last epoch's mean loss {last:.4f} is not "
                "below {share:.0%} of the first step's {first:.4f}"
            ).format(last=report["epoch_loss"], share=contract.LEARNED, first=report["first_loss"])
        )
    return problems


def _weights(p: SmokePlan, report: dict[str, Any]) -> list[str]:
    """Every rank ends with the same weights; DataParallel drives every device with one copy."""
    problems = []
    if p.devices is not None and report.get("devices") != p.devices:
        problems.append(
            ngettext(
                "trained on {got} device, expected {want}",
                "trained on {got} devices, expected {want}",
                report.get("devices") or 0,
            ).format(got=report.get("devices"), want=p.devices)
        )
    if p.devices is not None:  # DataParallel: one process, one copy of the weights
        if report.get("replicas") != 1:
            problems.append(
                _("DataParallel reported {n} weight copies, expected 1").format(
                    n=report.get("replicas")
                )
            )
    elif report["params_in_sync"] is not True:
        problems.append(_("parameters differ across ranks after training"))
    return problems


def _results(p: SmokePlan, report: dict[str, Any]) -> list[str]:
    """Validation ran, the checkpoint loads back, the strategy is the one planned."""
    problems = []
    accuracy = report["val_accuracy"]
    if not isinstance(accuracy, (int, float)) or not 0 <= accuracy <= 1:
        problems.append(_("no validation accuracy in [0, 1]: {v}").format(v=accuracy))
    if report["checkpoint_loads"] is not True:
        problems.append(_("the checkpoint written does not load back into a fresh model"))
    if p.strategy in SHARDED and report.get("strategy") != p.strategy:
        problems.append(
            _("trained with strategy {got}, expected {want}").format(
                got=report.get("strategy"), want=p.strategy
            )
        )
    return problems


def failed_rank(output: str) -> str | None:
    """The rank torchrun saw fail first, and how (its exception, exit code or signal)."""
    root = next((f for f in failures(output) if f.root), None)
    if root is None:
        return None
    if root.error:
        how = root.error
    elif root.exitcode is not None and root.exitcode < 0:
        how = _("killed by signal {n}").format(n=-root.exitcode)
    else:
        how = _("exit code {code}").format(code=root.exitcode)
    return _("rank {rank} failed first: {how}").format(rank=root.rank, how=how)


def hung_rank(output: str) -> str | None:
    """At a timeout, from each rank's stack dump: the ranks stuck outside torch (their
    peers wait for them inside a collective)."""
    stuck = {
        rank: frames[0]
        for rank, frames in main_stacks(output).items()
        if frames and not frames[0].library
    }
    if not stuck:
        return None
    return "; ".join(
        _("rank {rank} hung outside any collective, at {place}").format(rank=r, place=str(f))
        for r, f in sorted(stuck.items())
    )
