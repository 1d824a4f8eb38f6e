"""safe_extract: our own member checks and writer, never the stdlib filters; limits checked before any write."""
from __future__ import annotations

import gzip
import io
import os
import tarfile
import time

import pytest

from train.data.download import MAX_MEMBERS, safe_extract


def add(tar: tarfile.TarFile, name: str, kind: str = "file", data: bytes = b"x", link: str = "", size: int | None = None) -> None:
    info = tarfile.TarInfo(name)
    if kind == "file":
        info.size = len(data) if size is None else size
        tar.addfile(info, io.BytesIO(data))
        return
    info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE,
                 "blk": tarfile.BLKTYPE, "fifo": tarfile.FIFOTYPE}[kind]  # fmt: skip
    info.linkname = link
    tar.addfile(info)


def make(path, build, mode="w:gz", **kwargs) -> str:
    with tarfile.open(path, mode, **kwargs) as tar:
        build(tar)
    return str(path)


def snapshot(folder) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), folder) for d, dirs, files in os.walk(folder) for f in dirs + files}


@pytest.fixture
def box(tmp_path):
    """``box/`` holds the archive and the target ``box/out``; anything new in ``box`` besides them escaped."""
    (tmp_path / "box").mkdir()
    return tmp_path / "box"


def refuse(box, archive, match, **limits) -> str:
    before = snapshot(box.parent)
    with pytest.raises(ValueError, match=match) as info:
        safe_extract(archive, box / "out", **limits)
    message = str(info.value)
    assert "\n" not in message
    assert snapshot(box.parent) == before  # refused before writing anything: no target, nothing outside
    return message


def cve_2025_4517(tar: tarfile.TarFile) -> None:
    """The PATH_MAX bypass of the ``data`` filter (public PoC layout): nested long directories + symlinks, then escape."""
    comp, steps, path = "d" * 247, "abcdefghijklmnop", ""
    for step in steps:
        add(tar, os.path.join(path, comp), "dir")
        add(tar, os.path.join(path, step), "symlink", link=comp)
        path = os.path.join(path, comp)
    linkpath = os.path.join(*steps, "l" * 254)
    add(tar, linkpath, "symlink", link="../" * len(steps))
    add(tar, "escape", "symlink", link=linkpath + "/..")  # resolves to the parent of the target
    add(tar, "escape/escaped.txt", data=b"pwned")


def test_cve_2025_4517_archive_is_refused(box):
    archive = make(box / "poc.tar", cve_2025_4517, mode="w", format=tarfile.PAX_FORMAT)
    refuse(box, archive, "links are refused")
    assert not (box.parent / "escaped.txt").exists() and not (box / "escaped.txt").exists()


@pytest.mark.parametrize(
    "build,match",
    [
        (lambda t: (add(t, "ok.txt"), add(t, "a", "symlink", link="."), add(t, "a/b.txt")), "links are refused"),
        (lambda t: (add(t, "up", "symlink", link=".."), add(t, "up/escaped.txt")), "links are refused"),
        (lambda t: add(t, "link", "symlink", link="/etc/passwd"), "links are refused"),
        (lambda t: (add(t, "ok.txt"), add(t, "hard", "hardlink", link="ok.txt")), "links are refused"),
        (lambda t: add(t, "hard", "hardlink", link="../outside"), "links are refused"),
        (lambda t: add(t, "/tmp/ndpe_escaped_abs.txt"), "absolute path"),
        (lambda t: add(t, "C:/escaped.txt"), "drive"),
        (lambda t: add(t, "..\\escaped.txt"), "backslash"),
        (lambda t: add(t, "../escaped.txt"), r"'\.\.'"),
        (lambda t: add(t, "a/../../escaped.txt"), r"'\.\.'"),
        (lambda t: add(t, "dev", "chr"), "device"),
        (lambda t: add(t, "dev", "blk"), "device"),
        (lambda t: add(t, "pipe", "fifo"), "fifo"),
    ],
    ids=["symlink-write-through", "symlink-dotdot", "symlink-abs", "hardlink-inside", "hardlink-out", "absolute", "drive",
         "backslash", "dotdot", "dotdot-nested", "chardev", "blockdev", "fifo"],
)  # fmt: skip
def test_unsafe_members_are_refused_before_writing(box, build, match):
    archive = make(box / "a.tar.gz", lambda t: (add(t, "first.txt"), build(t)))
    refuse(box, archive, match)
    assert not os.path.exists("/tmp/ndpe_escaped_abs.txt")


def test_member_limit_refuses_one_member_too_many(box):
    archive = make(box / "eleven.tar.gz", lambda t: [add(t, f"f{i}") for i in range(11)])
    refuse(box, archive, "max_members=10 ", max_members=10)
    assert safe_extract(archive, box / "out", max_members=11) and (box / "out" / "f10").exists()


@pytest.mark.slow  # builds a 200k-member archive (about 15 s) and times the refusal
def test_member_limit_refuses_200k_members_quickly(box):
    path = box / "many.tar.gz"
    header = lambda i: tarfile.TarInfo(f"{i:07d}").tobuf(tarfile.GNU_FORMAT)  # noqa: E731 (empty regular files)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b"".join(header(i) for i in range(200_001)) + b"\0" * 1024)
    start = time.perf_counter()
    message = refuse(box, str(path), "more than max_members")
    assert time.perf_counter() - start < 15 and str(MAX_MEMBERS) in message  # the default limit; unbounded took 43 s
    refuse(box, str(path), "max_members=10 ", max_members=10)


def test_size_limit_refuses_declared_sizes_before_writing(box):
    archive = make(box / "big.tar.gz", lambda t: [add(t, f"f{i}", data=b"\0" * 100_000) for i in range(5)])
    refuse(box, archive, "more than max_bytes=250000 ", max_bytes=250_000)
    assert safe_extract(archive, box / "out", max_bytes=500_000) and (box / "out" / "f4").stat().st_size == 100_000


def test_huge_declared_size_is_refused_without_reading_the_data(box):
    path = box / "bomb.tar"
    info = tarfile.TarInfo("bomb")
    info.size = 1 << 40  # 1 TiB declared, no data follows
    path.write_bytes(info.tobuf(tarfile.GNU_FORMAT))
    refuse(box, str(path), "max_bytes")


def test_sparse_member_is_refused(box):
    def build(tar):
        info = tarfile.TarInfo("sparse")
        info.size = 10
        info.pax_headers = {"GNU.sparse.map": "0,10", "GNU.sparse.size": str(1 << 36), "GNU.sparse.name": "sparse"}
        tar.addfile(info, io.BytesIO(b"y" * 10))

    archive = make(box / "sparse.tar", build, mode="w", format=tarfile.PAX_FORMAT)
    with tarfile.open(archive) as tar:
        assert tar.getmembers()[0].sparse is not None  # tarfile reads it as a sparse member
    refuse(box, archive, "sparse|max_bytes", max_bytes=1 << 40)


def test_duplicate_path_is_refused(box):
    archive = make(box / "dup.tar.gz", lambda t: (add(t, "a.txt", data=b"1"), add(t, "./a.txt", data=b"2")))
    with pytest.raises(ValueError, match="second member"):
        safe_extract(archive, box / "out")
    assert snapshot(box.parent) - {"box/out", "box/out/a.txt"} == {"box", "box/dup.tar.gz"}


def test_regular_archive_round_trips(box):
    def build(tar):
        add(tar, "./", "dir")
        add(tar, "./yes", "dir")
        add(tar, "./yes/a.wav", data=b"abc")
        add(tar, "./no/b.wav", data=b"")  # parent directory not listed
        add(tar, "./validation_list.txt", data=b"yes/a.wav\n")

    out = safe_extract(make(box / "ok.tar.gz", build), box / "out")
    assert snapshot(out) == {"yes", "no", "yes/a.wav", "no/b.wav", "validation_list.txt"}
    assert (out / "yes" / "a.wav").read_bytes() == b"abc" and (out / "no" / "b.wav").read_bytes() == b""
