"""Everything genie prints. rich draws colour and tables, and plain text when stdout is not a
terminal or NO_COLOR is set. Nothing here decides anything."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from rich.markup import escape

from genie.i18n import _

if TYPE_CHECKING:
    from rich.console import Console

    from genie.launch import Command
    from genie.smoke import SmokeResult
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
        f"[bold red]{_('error')}:[/] {escape(message)}"
    )


def info(message: str) -> None:
    console().print(message, markup=False)


def summary(spec: Spec) -> None:
    from rich.table import Table

    from genie.spec import FIELD_BY_NAME

    table = Table(title=_("Project {n}").format(n=spec.name), show_header=False, box=None)
    for key, value in spec.answers().items():
        table.add_row(FIELD_BY_NAME[key].question.rstrip("?"), str(value))
    table.add_row(
        _("Global batch"),
        f"{spec.global_batch} = {spec.batch_size} x {spec.world_size} x {spec.grad_accum}",
    )
    console().print(table)
    for warning in spec.warnings():
        warn(warning)


def warn(message: str) -> None:
    console().print(f"[yellow]! {escape(message)}[/]")


def files(target: str, described: list[tuple[str, str]]) -> None:
    console().print(f"\n[bold]{_('Wrote')}[/] {target}/", markup=True)
    width = max(len(path) for path, _what in described)
    for path, what in described:
        console().print(f"  {path.ljust(width)}  [dim]{what}[/]", markup=True)


def commands(target: str, cmds: list[Command]) -> None:
    from genie.launch import shell_join

    console().print(f"\n[bold]{_('Launch')}[/] (cd {target}):", markup=True)
    for c in cmds:
        console().print(f"  {c.where}:  [cyan]{c.script}[/]", markup=True)
        console().print(f"    {shell_join(c.argv)}", markup=False, style="dim")


def stream(line: str) -> None:
    console().print("  │ " + line, markup=False, style="dim", soft_wrap=True)


def verdict(result: SmokeResult, title: str | None = None) -> None:
    from rich.table import Table

    p, r = result.plan, result.report or {}
    table = Table(title=title or _("Smoke test"), show_header=False)
    table.add_row(_("tested"), f"{p.nproc} processes, {p.backend}, {p.device}, {p.precision}")
    if r:
        table.add_row(_("steps"), str(r.get("steps")))
        table.add_row(_("loss"), f"{_fmt(r.get('first_loss'))} → {_fmt(r.get('last_loss'))}")
        table.add_row(_("parameters in sync"), str(r.get("params_in_sync")))
    table.add_row(_("seconds"), f"{result.seconds:.1f}")
    for note in p.notes:
        table.add_row(_("note"), note)
    for problem in result.problems:
        table.add_row("[red]" + _("problem") + "[/]", problem)
    table.add_row(_("verdict"), "[bold green]PASS[/]" if result.passed else "[bold red]FAIL[/]")
    console().print(table)


def _fmt(value: object) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)
