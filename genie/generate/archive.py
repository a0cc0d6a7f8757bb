"""The base of an upgrade: the project's files exactly as genie wrote them, kept in the
project as one archive (committed with it, so a teammate can upgrade too, and out of the
way of ``black .``, grep and editors, which a folder of copies would not be).

The archive is byte-for-byte reproducible: the same files give the same bytes (no times,
owners or modes of the machine that wrote it).
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import PurePosixPath

from genie.errors import GenieError
from genie.i18n import _

ARCHIVE = ".genie/base.tar.gz"


def pack(files: dict[str, bytes]) -> bytes:
    """``files`` (relative path -> content) as a reproducible .tar.gz."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(files[path]), 0o644, 0
            tar.addfile(info, io.BytesIO(files[path]))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=packed, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return packed.getvalue()


def unpack(data: bytes, where: str = ARCHIVE) -> dict[str, bytes]:
    """The files in an archive :func:`pack` wrote; a damaged or foreign one is one error."""
    damaged = _("{f} is damaged or not genie's; restore it from git (git checkout -- {f})")
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                path = PurePosixPath(member.name)
                if not member.isfile() or path.is_absolute() or ".." in path.parts:
                    raise GenieError(damaged.format(f=where))
                extracted = tar.extractfile(member)
                files[member.name] = extracted.read() if extracted else b""
    except (tarfile.TarError, OSError, EOFError) as err:
        raise GenieError(damaged.format(f=where)) from err
    return files
