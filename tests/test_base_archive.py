"""The base an upgrade merges from: the archive of the files as genie wrote them."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest

from genie.errors import GenieError
from genie.generate.archive import pack, unpack

FILES = {"train.py": b"print('hi')\n", "launch/single_node.sh": b"#!/bin/bash\n", "e": b""}


def test_the_archive_gives_back_exactly_the_files():
    assert unpack(pack(FILES)) == FILES


def test_the_same_files_give_the_same_bytes_whatever_their_order():
    again = dict(reversed(list(FILES.items())))
    assert pack(FILES) == pack(again)
    assert pack(FILES) != pack({**FILES, "e": b"x"})


def foreign(name: str, kind: bytes = tarfile.REGTYPE) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
        tar.addfile(info, io.BytesIO(b""))
    return gzip.compress(raw.getvalue())


@pytest.mark.parametrize(
    "data",
    [b"", b"not an archive", pack(FILES)[:40], foreign("../escape.py"), foreign("/abs.py"),
     foreign("link", tarfile.SYMTYPE)],  # fmt: skip
    ids=["empty", "garbage", "truncated", "dotdot", "absolute", "symlink"],
)
def test_a_damaged_or_foreign_archive_is_one_clear_error(data):
    with pytest.raises(GenieError, match=r"^\.genie/base\.tar\.gz is damaged or not genie's"):
        unpack(data)
