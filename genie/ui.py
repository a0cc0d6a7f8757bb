"""Everything genie prints. rich draws colour and tables, and plain text when stdout is not a
terminal or NO_COLOR is set. Nothing here decides anything."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from rich.markup import escape

from genie.i18n import N_, _, ngettext

if TYPE_CHECKING:
    from rich.console import Console

    from genie.detect import Machine
    from genie.doctor import Result as DoctorResult
    from genie.generate.launch import Command
    from genie.smoke.plan import SmokeResult
    from genie.smoke.signatures import Explanation
    from genie.spec import Spec


@functools.lru_cache(maxsize=1)
def console() -> Console:
    from rich.console import Console

    return Console(highlight=False)


def error(message: str) -> None:
    """One line on stderr, never wrapped."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True, highlight=False, soft_wrap=True).print(
        "[bold red]" + escape(_("error:")) + "[/] " + escape(message)
    )


def info(message: str) -> None:
    console().print(message, markup=False, soft_wrap=True)


def summary(spec: Spec, machine: Machine | None = None) -> None:
    from rich.table import Table

    from genie.spec.questions import FIELD_BY_NAME

    table = Table(title=_("Project {n}").format(n=spec.name), show_header=False, box=None)
    for key, value in spec.answers().items():
        table.add_row(FIELD_BY_NAME[key].question.rstrip("?？"), escape(str(value)))
    table.add_row(
        _("Global batch"),
        f"{spec.global_batch} = {spec.batch_size} x {spec.world_size} x {spec.grad_accum}",
    )
    console().print(table)
    for warning in spec.warnings():
        warn(warning)
    if machine is not None and spec.multi_node and spec.master_addr == machine.hostname:
        if machine.hostname_addresses is None:  # a loopback one is refused (no default)
            warning = _(
                "the master address is this machine's hostname ({h}), the default, which does "
                "not resolve here: genie cannot tell whether the other nodes reach it; pass "
                "--master-addr with node 0's IP to be sure"
            )
        else:
            warning = _(
                "the master address is this machine's hostname ({h}), the default: every "
                "node must reach it by that name, or pass --master-addr"
            )
        warn(warning.format(h=machine.hostname))


def warn(message: str) -> None:
    # soft_wrap: the terminal wraps it; rich would move a long CJK run (no spaces) to a new line
    console().print(f"[yellow]! {escape(message)}[/]", soft_wrap=True)


def files(target: str, described: list[tuple[str, str]]) -> None:
    console().print("\n" + _("Wrote {d}/").format(d=target), markup=False, style="bold")
    width = max(len(path) for path, _what in described)
    for path, what in described:  # soft_wrap: a long line is never broken into two
        console().print(f"  {path.ljust(width)}  [dim]{what}[/]", markup=True, soft_wrap=True)


def commands(target: str, cmds: list[Command]) -> None:
    import shlex

    # quoted: pasted into a shell; soft_wrap: never broken into two lines, at any width
    console().print(
        "\n" + _("Launch (cd {d}):").format(d=shlex.quote(target)),
        markup=False,
        style="bold",
        soft_wrap=True,
    )
    for c in cmds:
        console().print(f"  {c.where}:  [cyan]{c.script}[/]", markup=True, soft_wrap=True)
        if c.shell:
            console().print(f"    {c.shell}", markup=False, style="dim", soft_wrap=True)


def stream(line: str) -> None:
    console().print("  │ " + line, markup=False, style="dim", soft_wrap=True)


def verdict(result: SmokeResult, title: str | None = None) -> None:
    from rich.table import Table

    p, r = result.plan, result.report or {}
    table = Table(title=title or _("Smoke test"), show_header=False)
    if p.devices is not None:
        tested = ngettext(
            "1 process (DataParallel over {n} device), {device}, {precision}",
            "1 process (DataParallel over {n} devices), {device}, {precision}",
            p.devices,
        )
    else:
        tested = ngettext(
            "{n} process, {backend}, {device}, {precision}",
            "{n} processes, {backend}, {device}, {precision}",
            p.nproc,
        )
    table.add_row(
        _("tested"),
        tested.format(
            n=p.devices or p.nproc, backend=p.backend, device=p.device, precision=p.precision
        ),
    )
    if r:
        table.add_row(_("steps"), str(r.get("steps")))
        if "epoch_loss" in r:  # genie smoke: the first step, the last epoch's mean
            loss = _("{first} (first step) → {last} (last epoch's mean)").format(
                first=_fmt(r.get("first_loss")), last=_fmt(r.get("epoch_loss"))
            )
        else:
            loss = f"{_fmt(r.get('first_loss'))} → {_fmt(r.get('last_loss'))}"
        table.add_row(_("loss"), loss)
        if p.devices is not None:
            weights = _("one copy (DataParallel): nothing to compare across processes")
        else:
            weights = (
                _("identical on all {n} ranks (compared with a collective)").format(n=p.nproc)
                if r.get("params_in_sync") is True
                else _("DIFFER across ranks")
            )
        table.add_row(_("weights"), weights)
    table.add_row(_("seconds"), f"{result.seconds:.1f}")
    for note in p.notes:  # escaped: notes and problems quote paths and the run's output
        table.add_row(_("note"), escape(note))
    for problem in result.problems:
        table.add_row("[red]" + _("problem") + "[/]", escape(problem))
    passed = "[bold green]" + _("PASS") + "[/]"
    table.add_row(_("verdict"), passed if result.passed else "[bold red]" + _("FAIL") + "[/]")
    console().print(table)


def _fmt(value: object) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


_STATUS_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}
_STATUS_WORDS = {"pass": N_("PASS"), "warn": N_("WARN"), "fail": N_("FAIL")}


def doctor(results: list[DoctorResult]) -> None:
    """The checks as one table, then a count per status."""
    from rich.table import Table

    table = Table(title=_("genie doctor"), show_lines=False)
    for column in (_("check"), _("status"), _("found"), _("fix")):
        table.add_column(column, overflow="fold")
    for r in results:
        style = _STATUS_STYLE[r.status]
        status = "[" + style + "]" + _(_STATUS_WORDS[r.status]) + "[/]"
        table.add_row(r.id, status, escape(r.detail), escape(r.fix))
    console().print(table)
    counts = {s: sum(r.status == s for r in results) for s in _STATUS_STYLE}
    console().print(
        ngettext(
            "{p} passed, {w} warning, {f} failed",
            "{p} passed, {w} warnings, {f} failed",
            counts["warn"],
        ).format(
            p=counts["pass"],
            w=counts["warn"],
            f=counts["fail"],
        ),
        markup=False,
    )


def explain(found: list[Explanation], tail: list[str], project: str, footer: bool = True) -> None:
    """Why a run likely failed and how to fix it, then the last lines it printed; with
    ``footer``, where to check the machine."""
    c = console()
    if found:
        c.print("\n" + _("Likely cause"), markup=False, style="bold")
        for e in found:
            c.print(f"  [red]•[/] {escape(e.cause)}")
            if e.evidence:
                c.print("    " + _("seen: ") + e.evidence, markup=False, style="dim")
            # soft_wrap: a fix holds commands to paste, never broken into two lines
            c.print("    [green]" + escape(_("fix:")) + "[/] " + escape(e.fix), soft_wrap=True)
    else:
        c.print("\n" + _("No known failure signature matched the output."), markup=False)
    if tail:
        c.print("\n" + _("Last lines of the output:"), markup=False)
        for line in tail:
            stream(line)
    if footer:
        c.print(
            "\n" + _("Check this machine: genie doctor --project {d}").format(d=project),
            markup=False,
        )
