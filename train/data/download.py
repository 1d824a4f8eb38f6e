"""Download with a pinned SHA-256, and tar extraction that refuses to write outside its target.

``download(url, dest, sha256=...)`` streams to a temporary file next to ``dest``, checks the
digest and only then renames it into place: a wrong or truncated file never lands under its
final name. ``safe_extract(archive, target)`` checks every member first (no absolute paths,
no ``..``, no links whose target resolves outside ``target``, no devices or fifos) and then
extracts with ``tarfile``'s ``filter="data"`` where Python has it (3.12, 3.11.4+, 3.10.12+).
"""
from __future__ import annotations

import hashlib
import os
import tarfile
import tempfile
import urllib.request
from pathlib import Path, PurePosixPath


def sha256_of(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, dest: str | Path, *, sha256: str) -> Path:
    """Fetch ``url`` to ``dest`` unless a file with the right ``sha256`` is already there; raise on a mismatch."""
    dest = Path(dest)
    if dest.exists() and sha256_of(dest) == sha256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name + ".", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url) as response:
            while block := response.read(1 << 20):
                out.write(block)
        got = sha256_of(tmp)
        if got != sha256:
            raise OSError(f"checksum mismatch for {url}: sha256 {got}, expected {sha256}; the file was not kept")
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return dest


def _check_member(member: tarfile.TarInfo, target: Path) -> None:
    name = PurePosixPath(member.name)
    if name.is_absolute() or member.name.startswith(("/", "\\")) or ".." in name.parts:
        raise ValueError(f"unsafe tar member {member.name!r}: absolute path or '..' (refusing to extract)")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise ValueError(f"unsafe tar member {member.name!r}: device, fifo or other special file (refusing to extract)")
    if member.issym() or member.islnk():
        link = PurePosixPath(member.linkname)
        base = target / name.parent if member.issym() else target
        resolved = os.path.realpath(base / link) if not link.is_absolute() else str(link)
        if link.is_absolute() or os.path.commonpath([resolved, os.path.realpath(target)]) != os.path.realpath(target):
            raise ValueError(f"unsafe tar member {member.name!r}: link to {member.linkname!r} points outside {target}")


def safe_extract(archive: str | Path, target: str | Path) -> Path:
    """Extract ``archive`` (any compression tarfile reads) under ``target`` after checking every member."""
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        for member in members:
            _check_member(member, target)
        if hasattr(tarfile, "data_filter"):
            tar.extractall(target, members=members, filter="data")
        else:  # older Python: the checks above are the filter
            tar.extractall(target, members=members)
    return target
