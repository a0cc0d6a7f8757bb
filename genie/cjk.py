"""Terminal cells for wide (CJK) text: click's help and usage, and the wizard's hints. click
counts characters, so a Chinese help text would run past the terminal's edge and push option
columns apart; a prompt wrapped by the terminal cuts a word wherever the edge falls. Standard
library only, so ``--help`` stays light."""

from __future__ import annotations

import re
import textwrap
import unicodedata
from typing import Any

_ANSI = re.compile(r"\033\[[;?0-9]*[a-zA-Z]")
# Punctuation a line must not start with (kinsoku): the character before it moves down too.
_NO_LINE_START = set("，。、：；？！）」』》〉】％,.:;?!)]")
# ... and punctuation a line must not end with: it moves down to what it opens.
_NO_LINE_END = set("（「『《〈【([")
_WIDE = re.compile(
    r"([\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6])"
)
_ROOM = "\0"  # stands for the cells kept free at the end of the last line


def cells(text: str) -> int:
    """Columns ``text`` takes on a terminal: 2 for a wide character, 0 for an ANSI code."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in _ANSI.sub("", text))


def _cut(text: str, width: int) -> tuple[str, str]:
    """The longest head of ``text`` within ``width`` cells (at least one character), and the
    rest."""
    used = 0
    for i, char in enumerate(text):
        used += cells(char)
        if used > width:
            return text[: max(i, 1)], text[max(i, 1) :]
    return text, ""


def _moves_down(line: list[str], chunks: list[str]) -> bool:
    """Whether the line's last chunk goes to the next line: the next one may not start a line
    ("。"), or it may not end one ("（")."""
    return (
        bool(chunks)
        and len(line) > 1
        and (chunks[-1][:1] in _NO_LINE_START or line[-1][-1:] in _NO_LINE_END)
    )


_Base: Any = object


class _Cells(_Base):
    """A textwrap wrapper's line breaking, in cells: a line may break at a space or between
    two wide characters, never inside a word."""

    def _split(self, text: str) -> list[str]:
        chunks = super()._split(text)
        return [piece for chunk in chunks for piece in _WIDE.split(chunk) if piece]

    def _wrap_chunks(self, chunks: list[str]) -> list[str]:
        lines: list[str] = []
        chunks = list(reversed(chunks))
        while chunks:
            indent = self.subsequent_indent if lines else self.initial_indent
            room = max(self.width - cells(indent), 1)
            if lines and not chunks[-1].strip():
                chunks.pop()  # a new line does not start with a space
                continue
            line: list[str] = []
            used = 0
            while chunks and used + cells(chunks[-1]) <= room:
                used += cells(chunks[-1])
                line.append(chunks.pop())
            while _moves_down(line, chunks):
                chunks.append(line.pop())  # keep "。" with the character before it
            if chunks and not line:  # one chunk wider than the line
                head, chunks[-1] = _cut(chunks[-1], room)
                line.append(head)
            while line and not line[-1].strip():
                line.pop()
            lines.append(indent + "".join(line))
        return lines


class _Wrapper(_Cells, textwrap.TextWrapper):
    pass


def wrap(text: str, width: int, start: int = 0, indent: str = "", room: int = 0) -> list[str]:
    """``text`` in lines of at most ``width`` cells, broken at spaces or between two wide
    characters, never inside a word: the first line begins at column ``start`` (after a
    question, say), the others with ``indent``, and the last one leaves ``room`` cells free
    (for the answer typed after it). A first word that does not fit after ``start`` starts
    the text on the next line, the first line then being empty."""
    first = (_WIDE.split(text.split()[0]) if text.split() else [""])[0] or text[:1]
    if start and start + cells(first) > width:
        head, *rest = wrap(text, width, cells(indent), indent, room)
        return ["", indent + head, *rest]
    wrapper = _Wrapper(
        width=max(width, 1),
        initial_indent=" " * start,
        subsequent_indent=indent,
        break_on_hyphens=False,  # "--master-addr" stays whole
    )
    lines = wrapper.wrap(text + _ROOM * room) or [" " * start]  # glued: the last word moves too
    lines[0] = lines[0][start:]
    if room:
        lines[-1] = lines[-1].replace(_ROOM, "").rstrip() or indent
    return lines


def install() -> None:
    """Make click measure and wrap its help in terminal cells."""
    import click._textwrap as textwrap_module
    import click.formatting as formatting

    base: Any = textwrap_module.TextWrapper

    class CellWrapper(_Cells, base):
        """click's wrapper, measuring cells; a line may break between two wide characters."""

    textwrap_module.TextWrapper = CellWrapper  # type: ignore[misc]
    formatting.term_len = cells  # type: ignore[assignment]  # the options list's columns
