"""genie's command line: parse, call, print. One module per command; the logic lives in the
modules they call. :func:`main` is the one place a user's error becomes one line and an exit
status."""

from __future__ import annotations

import atexit
import gc
import sys

import click

# Each command module registers its command on the group as it is imported.
from genie.cli import convert, doctor, explain, new, plan, smoke, upgrade  # noqa: F401
from genie.cli.group import cli
from genie.errors import BAD_INPUT, INTERRUPTED, GenieError
from genie.i18n import _

__all__ = ["cli", "main"]


def main(argv: list[str] | None = None) -> None:
    """Console entry point: user errors print one line and exit non-zero, never a traceback."""
    if argv is None:  # the command itself: the process ends after this call
        # run last of the exit handlers: the interpreter's exit then skips a garbage
        # collection over every object of the modules loaded (bench/bench.py, "exit")
        atexit.register(gc.freeze)
    try:
        cli.main(args=argv, prog_name="genie", standalone_mode=False)
    except click.exceptions.Abort as err:
        # click turns KeyboardInterrupt and EOFError into Abort; the cause tells them apart.
        if isinstance(err.__cause__, EOFError):
            _fail(_("no more input; answer every question, or pass --yes and flags"), INTERRUPTED)
        _fail(_("interrupted; nothing written"), INTERRUPTED)
    except click.ClickException as err:
        if isinstance(err, click.NoSuchOption) and err.option_name == "--lang":
            name = err.ctx.info_name if err.ctx else "new"
            _fail(
                _(
                    "--lang is genie's own option: put it before the command, e.g. "
                    "genie --lang zh {c} ..."
                ).format(c=name),
                BAD_INPUT,
            )
        if isinstance(err, click.NoSuchOption):
            _suggest(err)
        err.show()
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        _fail(_("interrupted; nothing written"), INTERRUPTED)
    except GenieError as err:
        _fail(str(err), err.exit_code, shown_as=err.shown_as)


def _suggest(err: click.NoSuchOption) -> None:
    """Add the options that ``err``'s unknown one starts, or nearly spells (``--gpu`` ->
    ``--gpus-per-node``), to what click suggests."""
    from difflib import get_close_matches

    if err.ctx is None:
        return
    known = [o for p in err.ctx.command.params for o in (*p.opts, *p.secondary_opts)]
    typed = err.option_name
    found = [o for o in known if o.startswith(typed)]
    found += get_close_matches(typed, known, n=3, cutoff=0.5)
    if found:
        err.possibilities = list(dict.fromkeys(found))[:3]  # type: ignore[misc]


def _fail(message: str, code: int, shown_as: str = "error") -> None:
    """The one way genie ends with a non-zero status: the message (if any), then exit."""
    from genie import ui

    if message:
        (ui.info if shown_as == "info" else ui.error)(message)
    sys.exit(code)
