"""The ``genie`` click group: its options and the commands' shared settings."""

from __future__ import annotations

import click

from genie import __version__
from genie.i18n import LANGUAGES, _, translate_click

translate_click()  # click's own messages in genie's language


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    help=_("Answer a few questions, get a distributed PyTorch training project that runs."),
)
@click.version_option(__version__, prog_name="genie", message=_("%(prog)s, version %(version)s"))
@click.option(
    "--lang",
    type=click.Choice(LANGUAGES),
    help=_("Language of genie's messages [from LANGUAGE, LC_ALL, LC_MESSAGES or LANG; else en]."),
)
def cli(lang: str | None) -> None:
    # --lang was read before any message was translated (genie.i18n): here it is validated
    # and listed in --help.
    pass
