"""Download with a pinned SHA-256 (resumable), tar extraction by our own code, completion markers.

``download(url, dest, sha256=...)`` streams to ``dest + ".part"`` (one fixed name, so an
interrupted download is resumed with an HTTP ``Range`` request where the server honours it,
and restarted from zero where it does not), checks the digest and only then renames it into
place: a wrong or truncated file never lands under its final name, and a file that fails the
check is deleted.

``safe_extract(archive, target)`` does not use ``tarfile.extract``/``extractall`` or their
filters (the stdlib ``data`` filter is bypassable on CPython < 3.13.4 / 3.12.11 / 3.11.13 /
3.10.18 / 3.9.23 through the symlink + PATH_MAX trick, CVE-2025-4517). It reads the archive
twice, headers streamed lazily: the first pass checks every member and the member-count and
total-size limits without writing anything; the second writes, with the same checks, regular
files (data copied from ``tar.extractfile``) and directories only, under paths built from
normalised names and whose resolved location is checked to be inside ``target``. Symlinks,
hard links, devices, FIFOs, sparse files, absolute names, drive letters, backslashes and
``..`` components are refused (``ValueError``, one line). Mode bits, owners and times of the
archive are ignored.

``extract_complete(archive, target, sha256=...)`` extracts into a temporary sibling of
``target``, writes the marker ``.ndpe-complete`` (holding the archive's sha256) atomically
inside it, and renames the directory into place last: ``target`` either does not exist or is
complete. ``is_complete(target)`` tests for the marker.
"""
from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path, PurePosixPath, PureWindowsPath

MARKER = ".ndpe-complete"
# Limits sized for Speech Commands v2 (105,829 clips of <= 1 s 16-bit 16 kHz PCM, i.e. <= 3.4 GB, in 2.4 GB of .tar.gz).
MAX_MEMBERS = 110_000
MAX_BYTES = 4_000_000_000
MAX_DEPTH = 64  # folders in one member's path (the datasets use 3)
MAX_NAME_BYTES = 255  # one path component (NAME_MAX of ext4, APFS, NTFS)
MAX_PATH_BYTES = 4000  # one member's whole path (below PATH_MAX, 4096)
_CHUNK = 1 << 20


def sha256_of(path: str | Path, chunk: int = _CHUNK) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def file_lock(path: str | Path):
    """Exclusive advisory lock on ``path`` (created if missing) while inside; a no-op where ``fcntl`` is missing."""
    try:
        import fcntl
    except ImportError:  # Windows: no locking, concurrent downloads of the same file are the user's to avoid
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class DownloadError(FileNotFoundError):
    """A file that is not here and could not be fetched (no network, a refused or missing URL); the message names the
    URL and where to put the file by hand. A ``FileNotFoundError``, so the command lines report it as missing data."""


# what a failed fetch raises before any byte arrives or while reading (other OSErrors, e.g. a full disk, pass through)
NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError)


def _open_url(url: str, start: int):
    """Open ``url``, asking for bytes from ``start`` on when ``start > 0``; the caller checks the answer."""
    request = urllib.request.Request(url, headers={"Range": f"bytes={start}-"} if start else {})
    return urllib.request.urlopen(request)


def _fetch(url: str, part: Path) -> bool:
    """Append the rest of ``url`` to ``part`` (resume) or rewrite it from zero; return whether it resumed."""
    start = part.stat().st_size if part.exists() else 0
    with _open_url(url, start) as response:
        status = getattr(response, "status", None)
        content_range = response.headers.get("Content-Range", "") if response.headers else ""
        resumed = start > 0 and status == 206 and content_range.startswith(f"bytes {start}-")
        with open(part, "ab" if resumed else "wb") as out:
            while block := response.read(_CHUNK):
                out.write(block)
    return resumed


def download(url: str, dest: str | Path, *, sha256: str) -> Path:
    """Fetch ``url`` to ``dest`` unless a file with the right ``sha256`` is already there; raise on a mismatch.

    An interrupted download leaves ``dest + ".part"``, which the next call resumes (HTTP Range) or
    restarts; a resumed file that fails the checksum is fetched once more from zero. A network failure
    raises :class:`DownloadError` (one line: the URL, and where to put the file instead).
    """
    dest = Path(dest)
    if dest.exists() and sha256_of(dest) == sha256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    for stale in dest.parent.glob(glob_escape(dest.name) + ".*.part"):  # unique-named leftovers of older versions
        stale.unlink(missing_ok=True)
    if part.exists() and sha256_of(part) == sha256:  # interrupted between the last byte and the rename
        os.replace(part, dest)
        return dest
    for _ in range(2):
        try:
            try:
                resumed = _fetch(url, part)
            except urllib.error.HTTPError as err:
                if err.code != 416 or not part.exists():  # 416: the range asked for is past the end: start again
                    raise
                part.unlink()
                resumed = _fetch(url, part)
        except NETWORK_ERRORS as err:
            raise DownloadError(f"could not fetch {url} ({getattr(err, 'reason', err)}): check the network, or fetch it "
                                f"elsewhere and put it at {dest} (sha256 {sha256})") from None
        got = sha256_of(part)
        if got == sha256:
            os.replace(part, dest)
            return dest
        part.unlink()
        if not resumed:
            break
    raise OSError(f"checksum mismatch for {url}: sha256 {got}, expected {sha256}; the file was not kept (check the URL and sha256)")


def glob_escape(name: str) -> str:
    """``name`` with glob metacharacters escaped."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


# ------------------------------------------------------------------ extraction
class _Header(tarfile.TarInfo):
    """A member that remembers whether its header's name fields held a NUL before their last byte: tarfile cuts a
    name there (``a\\0b`` is read as ``a``), which the name alone no longer shows."""

    cut_name = False

    @classmethod
    def frombuf(cls, buf, encoding, errors):
        member = super().frombuf(buf, encoding, errors)
        member.cut_name = any(b"\0" in field.rstrip(b"\0") for field in (buf[0:100], buf[345:500]))
        return member


def _parts(member: tarfile.TarInfo) -> tuple[str, ...]:
    """The normalised path components of ``member`` (``.`` dropped); raise for any unsafe name or type."""
    name = member.name
    if getattr(member, "cut_name", False):
        raise ValueError(f"unsafe tar member {name!r}...: a NUL inside the name in its header (tarfile reads the name "
                         "up to it; expected a relative path)")
    if member.issym() or member.islnk():
        raise ValueError(f"unsafe tar member {name!r}: link to {member.linkname!r} (links are refused; expected regular files and directories only)")
    if member.sparse is not None or not (member.type in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE) or member.isdir()):
        raise ValueError(f"unsafe tar member {name!r}: device, fifo, sparse or other special file (expected regular files and directories only)")
    if not name or "\x00" in name or "\\" in name or PureWindowsPath(name).drive or name.startswith("/"):
        raise ValueError(f"unsafe tar member {name!r}: absolute path, drive, backslash or NUL in the name (expected a relative path)")
    parts = tuple(p for p in PurePosixPath(name).parts if p != ".")
    if ".." in parts:
        raise ValueError(f"unsafe tar member {name!r}: '..' in the path (expected a path inside the archive's folder)")
    if not parts and not member.isdir():
        raise ValueError(f"unsafe tar member {name!r}: a file without a name (expected a relative path)")
    if len(parts) > MAX_DEPTH:
        raise ValueError(f"unsafe tar member {name[:80]!r}...: {len(parts)} folders deep (at most {MAX_DEPTH})")
    long = next((p for p in parts if len(os.fsencode(p)) > MAX_NAME_BYTES), None)
    if long is not None:
        raise ValueError(f"unsafe tar member {name[:80]!r}: a name of {len(os.fsencode(long))} bytes (at most "
                         f"{MAX_NAME_BYTES}, the file systems' limit)")
    if len(os.fsencode(name)) > MAX_PATH_BYTES:
        raise ValueError(f"unsafe tar member {name[:80]!r}...: a path of {len(os.fsencode(name))} bytes (at most "
                         f"{MAX_PATH_BYTES})")
    return parts


def _check_layout(member: tarfile.TarInfo, parts: tuple[str, ...], seen: dict, target: Path) -> None:
    """First-pass check that ``member`` fits the members before it and the target: no path that is both a file and
    a folder, no file twice, no file over one already in ``target``. ``seen`` maps the paths so far to is-folder."""
    for i in range(1, len(parts)):
        if seen.setdefault(parts[:i], True) is False:
            raise ValueError(f"unsafe tar member {member.name!r}: {'/'.join(parts[:i])!r} is a file earlier in the "
                             "archive (a path cannot be a file and a folder)")
    before = seen.get(parts)
    if member.isdir():
        if before is False:
            raise ValueError(f"unsafe tar member {member.name!r}: a folder where the archive has a file")
        seen[parts] = True
        return
    if before is not None:
        what = "a second member with this path" if before is False else "a file where the archive has a folder"
        raise ValueError(f"unsafe tar member {member.name!r}: {what} (expected each path once)")
    seen[parts] = False
    if os.path.lexists(os.path.join(target, *parts)):
        raise ValueError(f"tar member {member.name!r}: {os.path.join(target, *parts)} already exists (extract into a "
                         "fresh folder)")


def _members(archive: Path, max_members: int, max_bytes: int):
    """Yield ``(tar, member, parts)`` streaming through ``archive``, checking each member and the running limits first."""
    count = total = 0
    with _read(archive, tarfile.open, archive, "r|*", tarinfo=_Header) as tar:  # stream: headers one by one
        while (member := _read(archive, tar.next)) is not None:
            count += 1
            if count > max_members:
                raise ValueError(f"tar archive {archive.name} has more than max_members={max_members} members (refusing to extract; raise the limit if the archive is trusted)")
            parts = _parts(member)
            total += member.size
            if total > max_bytes:
                raise ValueError(f"tar archive {archive.name} holds more than max_bytes={max_bytes} bytes of files (refusing to extract; raise the limit if the archive is trusted)")
            yield tar, member, parts
            tar.members.clear()  # TarFile keeps every header it read; the checks need none of them


def _read(archive: Path, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with tarfile's errors on a file that is no (or a damaged) tar archive as one line."""
    try:
        return fn(*args, **kwargs)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        if isinstance(err, OSError) and err.errno is not None:
            raise  # a file that cannot be read (missing, a folder, no permission): the OSError says so
        raise ValueError(f"{archive.name} is not a readable tar archive (tarfile: {err}); expected a .tar, .tar.gz, "
                         ".tar.bz2 or .tar.xz") from None


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, parts: tuple[str, ...], root: str) -> None:
    """Create the directory or regular file ``member`` at ``root/parts``, refusing any path that resolves elsewhere."""
    dest = os.path.join(root, *parts)
    parent = os.path.dirname(dest) if parts else root
    os.makedirs(parent, exist_ok=True)
    if not _inside(os.path.realpath(parent), root) or not _inside(os.path.realpath(dest), root):
        raise ValueError(f"unsafe tar member {member.name!r}: resolves outside the target {root} (refusing to extract)")
    if member.isdir():
        if parts:
            os.makedirs(dest, exist_ok=True)
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(dest, flags, 0o644)
    except FileExistsError:
        raise ValueError(f"unsafe tar member {member.name!r}: a second member with this path (expected each path once)") from None
    with os.fdopen(fd, "wb") as out:
        source = tar.extractfile(member)
        written = 0
        while block := source.read(_CHUNK):
            written += len(block)
            out.write(block)
    if written != member.size:
        raise ValueError(f"tar member {member.name!r}: {written} bytes read, {member.size} declared (truncated archive?)")


def safe_extract(
    archive: str | Path, target: str | Path, *, max_members: int = MAX_MEMBERS, max_bytes: int = MAX_BYTES
) -> Path:
    """Extract ``archive`` (any compression tarfile reads) under ``target``: regular files and directories only.

    Every member and both limits are checked in a first pass that writes nothing; on any refusal
    nothing is written. ``target`` is created if missing; an error during the second pass
    (disk full, a truncated archive) can leave part of the files, so extract into a fresh folder
    (:func:`extract_complete` does) when completeness matters.
    """
    archive, target = Path(archive), Path(target)
    seen: dict[tuple[str, ...], bool] = {}
    for _, member, parts in _members(archive, max_members, max_bytes):
        _check_layout(member, parts, seen, target)
    del seen
    target.mkdir(parents=True, exist_ok=True)
    root = os.path.realpath(target)
    for tar, member, parts in _members(archive, max_members, max_bytes):
        _write_member(tar, member, parts, root)
    return target


def is_complete(target: str | Path) -> bool:
    """Whether ``target`` holds the marker written after a verified, complete extraction."""
    return (Path(target) / MARKER).is_file()


def write_marker(folder: str | Path, text: str) -> None:
    """Write ``folder/.ndpe-complete`` atomically (temporary file, fsync, rename)."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=MARKER + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, Path(folder) / MARKER)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def staging_prefix(target: Path) -> str:
    return f".{target.name}.extracting-"


def extract_complete(archive: str | Path, target: str | Path, *, sha256: str, **limits) -> Path:
    """Extract ``archive`` into a temporary sibling of ``target``, mark it complete, then rename it to ``target``.

    ``target`` must not exist or be an empty folder. Leftover staging folders of interrupted runs
    are removed first (call this under :func:`file_lock` when several processes may extract).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(glob_escape(staging_prefix(target)) + "*"):
        shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=staging_prefix(target)))
    try:
        safe_extract(archive, staging, **limits)
        write_marker(staging, f"sha256 {sha256}\n")
        if target.is_dir() and not any(target.iterdir()):
            target.rmdir()
        os.rename(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target
