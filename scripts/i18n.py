"""genie's translation catalogs, with Babel: extract the messages, merge them into each
language's ``.po``, compile the ``.mo`` files genie ships.

    python scripts/i18n.py update    # after changing messages: extract, merge into the .po
    python scripts/i18n.py compile   # after translating: write the .mo files

Two domains: ``genie`` (genie's own messages, extracted from ``genie/``) and ``click`` (click's
usage and error messages, extracted from the installed click). ``tests/test_i18n.py`` fails when
a message lacks a translation, a translation drops a placeholder, or a ``.mo`` is stale.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from genie.i18n import CATALOGS, CLICK_DOMAIN, DOMAIN, LOCALE_DIR  # noqa: E402

# Babel's default keywords plus nothing else: _, N_, gettext, ngettext (with its plural).
KEYWORDS = {"_": None, "N_": None, "gettext": None, "ngettext": (1, 2)}


def source_dir(domain: str) -> Path:
    if domain == DOMAIN:
        return ROOT / "genie"
    import click

    return Path(click.__file__).parent


def extract(domain: str) -> Catalog:
    """Every message of ``domain`` as found in its source now."""
    template = Catalog(project="genie", domain=domain, fuzzy=False)
    root = source_dir(domain)
    for filename, lineno, message, comments, context in extract_from_dir(
        str(root), method_map=[("**.py", "python")], keywords=KEYWORDS,
        comment_tags=("TRANSLATORS:",), strip_comment_tags=True,
    ):  # fmt: skip
        location = (f"{root.name}/{filename}", lineno)
        template.add(message, None, [location], auto_comments=comments, context=context)
    return template


def po_path(language: str, domain: str) -> Path:
    return LOCALE_DIR / CATALOGS[language] / "LC_MESSAGES" / f"{domain}.po"


def read(path: Path) -> Catalog:
    with path.open("rb") as f:
        return read_po(f)


def write(path: Path, catalog: Catalog) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    write_po(buffer, catalog, width=100, omit_header=False, include_lineno=False,
             ignore_obsolete=True, sort_output=True)  # fmt: skip
    path.write_bytes(buffer.getvalue())


def compiled(catalog: Catalog) -> bytes:
    buffer = io.BytesIO()
    write_mo(buffer, catalog, use_fuzzy=False)
    return buffer.getvalue()


def update() -> None:
    for domain in (DOMAIN, CLICK_DOMAIN):
        template = extract(domain)
        for language in CATALOGS:
            path = po_path(language, domain)
            if path.exists():
                catalog = read(path)
            else:
                catalog = Catalog(locale=CATALOGS[language], domain=domain, project="genie")
            catalog.update(template, no_fuzzy_matching=True)
            write(path, catalog)
            missing = [m.id for m in catalog if m.id and not m.string]
            print(f"{path.relative_to(ROOT)}: {len(catalog)} messages, {len(missing)} untranslated")


def compile_all() -> None:
    for domain in (DOMAIN, CLICK_DOMAIN):
        for language in CATALOGS:
            path = po_path(language, domain)
            path.with_suffix(".mo").write_bytes(compiled(read(path)))
            print(f"wrote {path.with_suffix('.mo').relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["update", "compile"])
    args = parser.parse_args()
    update() if args.action == "update" else compile_all()


if __name__ == "__main__":
    main()
