"""``genie convert``'s doing and printing: read, convert (pure), show the diff and the
changes, write, then run the 2-process check."""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genie.convert.files import Layout
from genie.detect import Machine
from genie.errors import Aborted, GenieError, SmokeFailed
from genie.i18n import _


@dataclass(frozen=True)
class ConvertOptions:
    """What ``genie convert`` was asked to do besides the script itself."""

    output: Path | None = None  # None: SCRIPT_ddp.py
    nproc_per_node: int | None = None  # None: this machine's GPUs, or 2
    nodes: int = 1
    master_addr: str | None = None
    master_port: int = 29500
    check_args: str | None = ""  # None: no check
    check_dir: Path | None = None  # None: a new temporary directory
    timeout: float = 300.0
    force: bool = False
    yes: bool = False
    allow_todo: bool = False  # write a conversion with TODOs left instead of refusing it


def layout_from_flags(
    nproc_per_node: int | None, nodes: int, master_addr: str | None, master_port: int, gpus: int
) -> Layout:
    from genie.spec.questions import FIELD_BY_NAME

    if nodes > 1:
        if not master_addr:
            raise GenieError(
                _("--nodes {n} needs --master-addr (node 0's hostname or IP)").format(n=nodes)
            )
        master_addr = FIELD_BY_NAME["master_addr"].parse(master_addr)
    return Layout(nproc_per_node or gpus or 2, nodes, master_addr, master_port)


def run(script: Path, options: ConvertOptions) -> None:
    from genie import convert, detect, ui
    from genie.convert import files, program

    machine = detect.machine()
    o = options
    layout = layout_from_flags(
        o.nproc_per_node, o.nodes, o.master_addr, o.master_port, machine.gpus
    )
    try:
        source = script.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise GenieError(_("cannot read {s}: {e}").format(s=script, e=err)) from None
    conversion = convert.convert(source, script.name, program.read(script, source))
    if not o.allow_todo:
        _refuse_todos(script, conversion)
    target = o.output or files.default_output(script)
    planned = files.plan(script, target, conversion.code, layout)
    planned.update({m.copy_path.absolute(): c.code for m, c in conversion.modules})
    files.check_writable(script, planned, o.force, [m.path for m, _c in conversion.modules])
    show_diff(convert.unified_diff(conversion, str(script), str(target)))
    for local, copy in conversion.modules:
        show_diff(convert.unified_diff(copy, str(local.path), str(local.copy_path)))
    heading = _("Changes (lines of {script}):").format(script=script)
    ui.console().print("\n" + heading, markup=False, style="bold")
    for line in convert.report(conversion, script.name, layout.nproc_per_node, layout.nodes):
        style = "yellow" if " TODO " in line[:10] else None
        ui.console().print(line, markup=False, style=style, soft_wrap=True)
    if not o.yes and sys.stdin.isatty():
        import click

        if not click.confirm(_("Write {t}?").format(t=target), default=True):
            raise Aborted(_("nothing written"))
    files.write(planned)
    ui.files(str(target.parent), _described(target, planned, conversion))
    ui.commands(str(target.parent), files.commands(target, layout))
    if o.check_args is not None:
        try:
            _check(target, shlex.split(o.check_args), machine, o, layout)
        except KeyboardInterrupt:
            raise Aborted(
                _("interrupted; {t} is written, its check did not finish").format(t=target)
            ) from None


def _described(target: Path, planned: dict[Path, str], conversion: Any) -> list[tuple[str, str]]:
    """Each file written, with what it is."""
    where = target.absolute().parent
    copies = {m.copy_path.absolute(): m.label for m, _c in conversion.modules}
    described = [
        (
            os.path.relpath(p, where),
            _("genie's copy of {m}").format(m=copies[p]) if p in copies else _("launch script"),
        )
        for p in planned
    ]
    described[0] = (described[0][0], _("the converted script"))
    return described


def _refuse_todos(script: Path, conversion: Any) -> None:
    """Refuse, in one line and before anything is written, a conversion that left a place
    genie could not convert safely: such a script would run and train wrong."""
    places = [(str(script), c) for c in conversion.todos]
    places += [(m.label, c) for m, c in conversion.modules for c in c.todos]
    if not places:
        return
    (first, change), more = places[0], places[1:]
    also = ""
    if more:
        also = _(" (and {n} more: {w})").format(
            n=len(more), w=", ".join(f"{f}:{c.line}" for f, c in more)
        )
    raise GenieError(
        _(
            "cannot convert {f}:{n}: {what}{also}; nothing written (--allow-todo writes the "
            "script with a '# genie: TODO:' at each such line, to finish by hand)"
        ).format(f=first, n=change.line, what=change.what, also=also)
    )


def _check(
    target: Path, args: list[str], machine: Machine, options: ConvertOptions, layout: Layout
) -> None:
    from genie import ui
    from genie.convert import check

    cwd = options.check_dir
    where = str(cwd) if cwd else _("a temporary directory (--check-dir to choose)")
    ui.info(
        _("\nCheck: the converted script on 2 processes under torchrun, in {w}...").format(w=where)
    )
    result = check.run(target, args, machine, options.timeout, echo=ui.stream, cwd=cwd)
    if (layout.nodes, layout.nproc_per_node) != (1, result.plan.nproc):
        note = _("planned {nodes} node(s) x {per} processes; tested 1 node x {n}").format(
            nodes=layout.nodes, per=layout.nproc_per_node, n=result.plan.nproc
        )
        result.plan = dataclasses.replace(result.plan, notes=(*result.plan.notes, note))
    ui.verdict(result, title=_("Convert check"))
    if not result.passed:
        raise SmokeFailed(_("check failed: ") + "; ".join(result.problems))


def show_diff(diff: str) -> None:
    from genie import ui

    styles = {"+": "green", "-": "red", "@": "cyan"}
    for line in diff.splitlines():
        style = None if line.startswith(("+++", "---")) else styles.get(line[:1])
        ui.console().print(line, markup=False, style=style, soft_wrap=True, highlight=False)
