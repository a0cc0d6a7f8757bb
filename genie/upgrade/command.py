"""``genie upgrade``'s doing and printing: re-render the project from its answers (re-targeted
by flags) with today's genie, merge that into the user's files three ways, show the plan,
write it all or nothing. The smoke test that follows is the smoke stage's."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genie.errors import Conflicts, GenieError
from genie.i18n import _, ngettext

if TYPE_CHECKING:
    from genie.detect import Machine
    from genie.spec import Spec
    from genie.upgrade.plan import Step


def upgrade(
    directory: Path, flags: Mapping[str, Any], *, dry_run: bool, force: bool
) -> tuple[Spec, Machine] | None:
    """Upgrade the project in ``directory``: the spec it now has and this machine, or None
    after a dry run (nothing written). Conflicts left in files raise :class:`Conflicts`."""
    from genie import detect, ui
    from genie.generate import engine
    from genie.spec import build_spec
    from genie.upgrade import apply, prepare

    target = directory.absolute()
    finished = False  # the changes git shows are then genie's own, from that upgrade
    if apply.interrupted(target):
        if dry_run:
            raise GenieError(_(apply.INTERRUPTED).format(d=directory))
        finished = apply.finish(target)
        ui.info(_("Finished the upgrade that was interrupted."))
    elif not dry_run:
        apply.finish(target)  # drops what a genie killed before its commit had staged
    answers = prepare.answers(target, flags)
    changed = prepare.uncommitted(target)
    if changed and not (force or dry_run or finished):
        raise GenieError(
            _(
                "{d} has uncommitted changes ({f}); commit or stash them first so that git diff "
                "shows the upgrade, or pass --force"
            ).format(d=directory, f=", ".join(changed[:3]) + (", ..." if len(changed) > 3 else ""))
        )
    machine = detect.machine()
    spec = build_spec(answers, machine)
    upgrade_ = prepare.prepare(target, engine.render(spec))
    _print_plan(upgrade_.steps)
    if dry_run:
        _print_diff(target, upgrade_.steps)
        ui.info(_("Dry run: nothing written."))
        return None
    apply.write(target, upgrade_.steps, upgrade_.records)
    conflicts = [f"{s.path}:{line}" for s in upgrade_.steps for line in s.conflicts]
    if conflicts:
        raise Conflicts(
            ngettext(
                "{n} conflict: {c}; keep what you want between <<<<<<< yours and >>>>>>> genie, "
                "delete the markers, then run genie smoke {d}",
                "{n} conflicts: {c}; keep what you want between <<<<<<< yours and >>>>>>> "
                "genie, delete the markers, then run genie smoke {d}",
                len(conflicts),
            ).format(n=len(conflicts), c=", ".join(conflicts), d=directory)
        )
    return spec, machine


def _print_plan(steps: list[Step]) -> None:
    from genie import ui
    from genie.cjk import cells
    from genie.upgrade import plan

    words = {
        plan.REPLACE: _("replaced"),
        plan.MERGE: _("merged"),
        plan.CONFLICT: _("conflict"),
        plan.ADD: _("added"),
        plan.REMOVE: _("removed"),
        plan.SIDE: _("beside yours"),
        plan.KEEP: _("kept (genie no longer writes it; you changed it)"),
    }
    if not steps:
        ui.info(_("Every file is up to date."))
        return
    ui.info(_("Upgrade plan:"))
    width = max(12, *(cells(words[s.kind]) for s in steps))  # wide (CJK) text: 2 cells a char
    for step in sorted(steps, key=lambda s: (list(words).index(s.kind), s.path)):
        lines = "".join(f":{line}" for line in step.conflicts)
        word = words[step.kind]
        ui.info(f"  {word}{' ' * (width - cells(word))} {step.written}{lines}")


def _print_diff(target: Path, steps: list[Step]) -> None:
    """Each file's change, as ``git diff`` would show it."""
    from difflib import unified_diff

    from genie import ui

    for step in steps:
        where = target / step.path
        old = where.read_bytes() if step.kind != "side" and where.is_file() else b""
        new = step.content or b""
        try:
            a, b = old.decode("utf-8"), new.decode("utf-8")
        except UnicodeDecodeError:
            ui.info(_("Binary file {p} differs").format(p=step.written))
            continue
        for line in unified_diff(
            a.splitlines(keepends=True),
            b.splitlines(keepends=True),
            f"a/{step.written}",
            f"b/{step.written}",
        ):
            ui.info(line.rstrip("\n"))
