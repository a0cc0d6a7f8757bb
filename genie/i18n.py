"""genie's language: every user-facing string goes through :func:`_` (or :func:`ngettext`), and
gettext catalogs under ``genie/locale`` translate it.

The language is chosen once per process, before the first message, because tables of
questions and help texts are translated when their modules load: ``--lang {en,zh}`` before
the subcommand, else the first of ``LANGUAGE``, ``LC_ALL``, ``LC_MESSAGES`` and ``LANG`` that
is set (the order gettext reads them), Chinese when it starts with ``zh``, English otherwise.

Text written into a generated project never depends on that choice: it is translated with
:func:`translator` for the project's own documentation language.

Catalog sources are ``genie/locale/<catalog>/LC_MESSAGES/*.po``; ``python scripts/i18n.py``
extracts, updates and compiles them (Babel), and a test fails when a compiled ``.mo`` is stale.
"""

from __future__ import annotations

import gettext as _gettext
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

LANGUAGES = ("en", "zh")
CATALOGS = {"zh": "zh_CN"}  # language -> catalog folder under genie/locale
DOMAIN = "genie"
CLICK_DOMAIN = "click"  # click's own messages (usage, option errors), translated by genie
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
ENV_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")
Translations = _gettext.NullTranslations

_active: _gettext.NullTranslations | None = None
_language = "en"


def language_from(argv: Sequence[str], environ: Mapping[str, str]) -> str:
    """The language ``argv`` (without the program name) and ``environ`` ask for."""
    flag = _lang_flag(argv)
    if flag in LANGUAGES:
        return flag
    for name in ENV_VARIABLES:
        value = environ.get(name, "")
        if value:
            return "zh" if value.split(":")[0].lower().startswith("zh") else "en"
    return "en"


def _lang_flag(argv: Sequence[str]) -> str | None:
    """``--lang X`` or ``--lang=X`` among the options before the subcommand."""
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--lang":
            return args[i + 1] if i + 1 < len(args) else None
        if arg.startswith("--lang="):
            return arg.partition("=")[2]
        if not arg.startswith("-"):  # the subcommand: its options are not genie's --lang
            return None
    return None


def load(language: str, domain: str = DOMAIN) -> _gettext.NullTranslations:
    """The catalog of ``language``; English is the message ids themselves."""
    catalog = CATALOGS.get(language)
    if catalog is None:
        return _gettext.NullTranslations()
    return _gettext.translation(domain, LOCALE_DIR, languages=[catalog], fallback=True)


def activate(language: str) -> None:
    """Choose the language of everything genie prints from now on."""
    global _active, _language
    _language = language if language in LANGUAGES else "en"
    _active = load(_language)


def current() -> str:
    _translations()
    return _language


def _translations() -> _gettext.NullTranslations:
    if _active is None:
        activate(language_from(sys.argv[1:], os.environ))
    assert _active is not None
    return _active


def _(message: str) -> str:
    """``message`` in the user's language."""
    return _translations().gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    """The singular or plural form for ``n``, in the user's language."""
    return _translations().ngettext(singular, plural, n)


def N_(message: str) -> str:
    """Mark ``message`` for translation where it is declared; translate it where it is shown."""
    return message


def translations(language: str | None = None) -> _gettext.NullTranslations:
    """The catalog of ``language`` (text written into a project, whatever genie speaks), or
    of genie's own language."""
    return _translations() if language is None else load(language)


def translate_click() -> None:
    """Route click's own messages ("Usage:", "No such option", ...) through genie's catalog
    of them, and lay its help out in terminal cells. click calls the ``gettext`` it imported
    into each module; genie replaces that name in the modules that print something."""
    language = current()
    if language == "en":
        return
    import importlib

    from genie import cjk

    cjk.install()  # click counts characters; a wide one takes two terminal cells
    click_catalog = load(language, CLICK_DOMAIN)
    for name in ("core", "decorators", "exceptions", "formatting", "parser", "types", "termui"):
        module = importlib.import_module(f"click.{name}")
        if hasattr(module, "_"):
            module._ = click_catalog.gettext  # type: ignore[attr-defined]
        if hasattr(module, "ngettext"):
            module.ngettext = click_catalog.ngettext  # type: ignore[attr-defined]
