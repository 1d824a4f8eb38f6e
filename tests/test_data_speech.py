"""Speech Commands v2 on a tiny tree in the official layout; WAV reading; download check; safe extraction."""
from __future__ import annotations

import io
import math
import signal
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import scipy.io.wavfile
import torch

from train.data import build_dataset
import train.data.download as dl
from train.data.download import MARKER, safe_extract, sha256_of
from train.data.speech_commands import CLASSES_12, WORDS_35, download_speech_commands, read_wav

SR = 16000
WORDS = {"yes": 6, "no": 6, "up": 4, "cat": 5, "dog": 5, "wow": 4}  # word -> files; cat/dog/wow are _unknown_ in the 12-class set


def write_tree(root) -> dict[str, str]:
    """Write the layout with scipy's WAV writer; return {relpath: split}."""
    rng = np.random.default_rng(0)
    splits = {}
    for word, count in WORDS.items():
        (root / word).mkdir(parents=True)
        for i in range(count):
            rel = f"{word}/{i % 3:08x}_nohash_{i}.wav"
            length = int(SR * rng.uniform(0.6, 1.0))
            scipy.io.wavfile.write(root / rel, SR, (rng.uniform(-0.5, 0.5, length) * 32767).astype(np.int16))
            splits[rel] = "val" if i == 1 else "test" if i == 2 else "train"
    (root / "validation_list.txt").write_text("".join(f"{r}\n" for r, s in splits.items() if s == "val"))
    (root / "testing_list.txt").write_text("".join(f"{r}\n" for r, s in splits.items() if s == "test"))
    (root / "_background_noise_").mkdir()
    for name in ("white_noise.wav", "pink_noise.wav"):
        scipy.io.wavfile.write(root / "_background_noise_" / name, SR, (rng.uniform(-0.9, 0.9, int(1.5 * SR)) * 32767).astype(np.int16))
    (root / MARKER).write_text("")  # a manual extraction, declared complete
    return splits


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("speech_commands")
    return root, write_tree(root)


def test_splits_follow_the_lists(tree):
    root, splits = tree
    for split in ("train", "val", "test"):
        data = build_dataset("speech_commands", split, root=str(root), classes=35)
        assert sorted(rel for rel, _ in data.items) == sorted(r for r, s in splits.items() if s == split)
        assert all(label == WORDS_35.index(rel.split("/")[0]) for rel, label in data.items)
        assert data.num_classes == 35


def test_twelve_classes_unknown_and_silence(tree):
    root, splits = tree
    data = build_dataset("speech_commands", "train", root=str(root), unknown_percent=50, silence_percent=25)
    wanted = [r for r, s in splits.items() if s == "train" and r.split("/")[0] in ("yes", "no", "up")]
    labels = [label for _, label in data.items]
    assert data.classes == CLASSES_12 and data.num_classes == 12
    assert labels.count(10) == math.ceil(len(wanted) * 0.5) and labels.count(11) == math.ceil(len(wanted) * 0.25)
    assert sorted(r for r, label in data.items if label < 10) == sorted(wanted)
    assert all(r.split("/")[0] in ("cat", "dog", "wow") for r, label in data.items if label == 10)
    other_seed = build_dataset("speech_commands", "train", root=str(root), unknown_percent=50, seed=1)
    assert len(other_seed) > 0


def test_items_are_log_mel_of_padded_clips(tree):
    root, _ = tree
    data = build_dataset("speech_commands", "val", root=str(root), eval_noise=False)
    mel, label = data[0]
    assert mel.shape == (1, 64, 101) and mel.dtype == torch.float32 and label == CLASSES_12.index(data.items[0][0].split("/")[0])
    rel = data.items[0][0]
    wave = data.waveform(0)
    reference = scipy.io.wavfile.read(root / rel)[1] / 32768.0
    np.testing.assert_allclose(wave[: len(reference)], reference, atol=1e-7)  # no augmentation off the train split
    assert (wave[len(reference) :] == 0).all() and len(wave) == SR  # zero-padded at the end to 1 s
    longer = build_dataset("speech_commands", "val", root=str(root), duration=2.0, eval_noise=False)
    assert longer[0][0].shape == (1, 64, 201)
    assert torch.equal(data[0][0], data[0][0])  # val items are fixed


@pytest.mark.parametrize("duration", [1.0, 2.0])
def test_eval_clips_hold_the_keyword_at_a_random_offset_in_background_noise(tree, duration):
    """Longer audio holds more audio: each val/test clip is the word, whole, at one offset, plus a background cut at
    volume <= 0.1 (the training range) everywhere else; offsets differ between items; items are fixed."""
    root, _ = tree
    data = build_dataset("speech_commands", "test", root=str(root), duration=duration, silence_percent=0)
    noises = [scipy.io.wavfile.read(p)[1] / 32768.0 for p in sorted((root / "_background_noise_").glob("*.wav"))]
    peak = max(np.abs(n).max() for n in noises) * 0.1 + 1e-6  # the loudest background at the largest volume
    starts = []
    for i, (rel, _) in enumerate(data.items):
        wave, word = data.waveform(i), scipy.io.wavfile.read(root / rel)[1] / 32768.0
        assert len(wave) == int(duration * SR) and np.array_equal(wave, data.waveform(i))
        fits = [s for s in range(len(wave) - len(word) + 1) if np.abs(wave[s:s + len(word)] - word).max() <= peak]
        assert len(fits) == 1, (rel, fits[:5])  # the word is there once, whole, under noise at most `peak`
        starts.append(fits[0])
        outside = np.concatenate([wave[:fits[0]], wave[fits[0] + len(word):]])
        assert np.abs(outside).max() <= peak and (outside.size == 0 or np.abs(outside).max() > 0)  # noise, not silence
    assert len(set(starts)) > 1


def test_eval_noise_needs_background_files(tmp_path):
    write_tree(tmp_path / "sc")
    for wav in (tmp_path / "sc" / "_background_noise_").glob("*.wav"):
        wav.unlink()
    with pytest.raises(FileNotFoundError, match="evaluation clips are placed in its noise"):
        build_dataset("speech_commands", "val", root=str(tmp_path / "sc"), silence_percent=0)
    assert len(build_dataset("speech_commands", "val", root=str(tmp_path / "sc"), silence_percent=0, eval_noise=False))


def test_one_data_folder_holds_the_dataset_in_its_subfolder(tmp_path, monkeypatch):
    write_tree(tmp_path / "data" / "speech_commands_v0.02")
    direct = build_dataset("speech_commands", "test", root=str(tmp_path / "data" / "speech_commands_v0.02"), classes=35)
    assert [r for r, _ in build_dataset("speech_commands", "test", root=str(tmp_path / "data"), classes=35).items] == \
        [r for r, _ in direct.items]
    monkeypatch.setenv("NDPE_DATA", str(tmp_path / "data"))  # the default data folder
    assert len(build_dataset("speech_commands", "test", classes=35)) == len(direct)
    monkeypatch.setenv("NDPE_DATA", str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match=r"empty/speech_commands_v0\.02 .* fetch it with python -m train\.bench "
                                                r"--config configs/bench/real\.yaml download=true"):
        build_dataset("speech_commands", "test")


def test_silence_is_background_noise_and_fixed_off_train(tree):
    root, _ = tree
    data = build_dataset("speech_commands", "test", root=str(root), silence_percent=100)
    index = next(i for i, (rel, _) in enumerate(data.items) if rel is None)
    wave = data.waveform(index)
    assert len(wave) == SR and 0 < np.abs(wave).max() <= 0.9 + 1e-4
    np.testing.assert_array_equal(wave, data.waveform(index))


def test_train_augmentation_follows_torch_seed(tree):
    root, _ = tree
    data = build_dataset("speech_commands", "train", root=str(root))
    torch.manual_seed(0)
    a = [data.waveform(0) for _ in range(4)]
    torch.manual_seed(0)
    b = [data.waveform(0) for _ in range(4)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(a[0], x) for x in a[1:])  # shifts / noise differ between draws


@pytest.mark.parametrize(
    "rate,samples,words",
    [(44100, np.zeros(100, np.int16), ["44100 Hz"]), (SR, np.zeros((100, 2), np.int16), ["2 channel"]),
     (SR, np.zeros(100, np.uint8), ["8-bit"]), (SR, np.zeros(100, np.float32), ["not a PCM WAV"])],
)  # fmt: skip
def test_read_wav_rejects_other_formats(tmp_path, rate, samples, words):
    scipy.io.wavfile.write(tmp_path / "x.wav", rate, samples)
    with pytest.raises(ValueError) as info:
        read_wav(tmp_path / "x.wav")
    assert all(w in str(info.value) for w in words)


def test_read_wav_matches_scipy(tmp_path):
    pcm = np.array([0, 1, -1, 32767, -32768, 1234], np.int16)
    scipy.io.wavfile.write(tmp_path / "x.wav", SR, pcm)
    np.testing.assert_array_equal(read_wav(tmp_path / "x.wav"), pcm / np.float32(32768))


def test_missing_or_wrong_root_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="download=True"):
        build_dataset("speech_commands", "train", root=str(tmp_path))
    (tmp_path / "validation_list.txt").write_text("")
    (tmp_path / "testing_list.txt").write_text("")
    (tmp_path / "hello").mkdir()
    with pytest.raises(FileNotFoundError, match=MARKER):  # no marker: not known to be complete, never used
        build_dataset("speech_commands", "train", root=str(tmp_path), classes=35)
    (tmp_path / MARKER).write_text("")
    with pytest.raises(ValueError, match="'hello' is not a Speech Commands v2 word"):
        build_dataset("speech_commands", "train", root=str(tmp_path), classes=35)


# ------------------------------------------------------------------ download and extraction
def tar_of(tmp_path, members) -> str:
    """A .tar.gz of ``members``: (name, bytes) regular files or (name, "symlink"/"hardlink", target)."""
    path = tmp_path / "archive.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, *rest in members:
            info = tarfile.TarInfo(name)
            if rest[0] in ("symlink", "hardlink"):
                info.type, info.linkname = (tarfile.SYMTYPE if rest[0] == "symlink" else tarfile.LNKTYPE), rest[1]
                tar.addfile(info)
            else:
                info.size = len(rest[0])
                tar.addfile(info, io.BytesIO(rest[0]))
    return str(path)


def archive_of(source, path):
    with tarfile.open(path, "w:gz") as tar:
        for file in sorted(source.rglob("*")):
            if file.name != MARKER:
                tar.add(file, arcname="./" + file.relative_to(source).as_posix(), recursive=False)
    return path


@pytest.fixture(scope="module")
def served(tree, tmp_path_factory):
    """(url, sha256) of a .tar.gz of the tree, as a file:// URL."""
    archive = archive_of(tree[0], tmp_path_factory.mktemp("served") / "src.tar.gz")
    return archive.as_uri(), sha256_of(archive)


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != ".root.lock")


def test_download_verifies_sha256_then_extracts(served, tmp_path):
    url, digest = served
    with pytest.raises(OSError, match="checksum mismatch"):
        download_speech_commands(tmp_path / "root", url=url, sha256="0" * 64)
    assert leftovers(tmp_path) == []  # nothing kept, not even a partial file
    root = download_speech_commands(tmp_path / "root", url=url, sha256=digest)
    assert leftovers(tmp_path) == ["root"] and (root / MARKER).read_text() == f"sha256 {digest}\n"
    assert len(build_dataset("speech_commands", "test", root=str(root), classes=35)) == len(WORDS)


class Killed(BaseException):
    """Stands for a kill: not an Exception, so no handler of ours swallows it."""


def after(calls: int, real):
    """``real`` that raises Killed on call number ``calls`` (1-based)."""
    count = [0]

    def wrapper(*args, **kwargs):
        count[0] += 1
        if count[0] >= calls:
            raise Killed
        return real(*args, **kwargs)

    return wrapper


def killed_reader(real_open):
    def opener(url, start):
        response = real_open(url, start)
        response.read = after(2, response.read)  # one chunk arrives, then the process dies
        return response

    return opener


def kill_after_marker(real):
    def wrapper(folder, text):
        real(folder, text)
        raise Killed

    return wrapper


STAGES = {
    "mid-download": lambda mp: (mp.setattr(dl, "_CHUNK", 1024), mp.setattr(dl, "_open_url", killed_reader(dl._open_url))),
    "before-extraction": lambda mp: mp.setattr(dl, "safe_extract", after(1, dl.safe_extract)),
    "mid-extraction": lambda mp: mp.setattr(dl, "_write_member", after(6, dl._write_member)),
    "before-marker": lambda mp: mp.setattr(dl, "write_marker", after(1, dl.write_marker)),
    "after-marker-before-rename": lambda mp: mp.setattr(dl, "write_marker", kill_after_marker(dl.write_marker)),
}


@pytest.mark.parametrize("stage", STAGES)
def test_killed_download_is_never_used_and_is_cleaned_up(served, tmp_path, monkeypatch, stage):
    url, digest = served
    root = tmp_path / "root"
    with monkeypatch.context() as mp:
        STAGES[stage](mp)
        with pytest.raises(Killed):
            download_speech_commands(root, url=url, sha256=digest)
    assert not root.exists()  # the staging folder is only renamed into place once complete
    with pytest.raises(FileNotFoundError, match="download=True"):
        build_dataset("speech_commands", "test", root=str(root), classes=35)
    download_speech_commands(root, url=url, sha256=digest)
    assert leftovers(tmp_path) == ["root"]  # no .part, no archive, no staging folder
    assert len(build_dataset("speech_commands", "test", root=str(root), classes=35)) == len(WORDS)


def test_partial_download_is_resumed_with_range(served, tmp_path, monkeypatch):
    """An HTTP server that honours Range: the second run asks for the rest only."""
    import http.server
    import threading

    data = urllib.request.urlopen(served[0]).read()
    ranges = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            start = int(self.headers["Range"].split("=")[1].rstrip("-")) if self.headers["Range"] else 0
            ranges.append(self.headers["Range"])
            self.send_response(206 if start else 200)
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            self.wfile.write(data[start:])

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/sc.tar.gz"
        with monkeypatch.context() as mp:
            STAGES["mid-download"](mp)
            with pytest.raises(Killed):
                download_speech_commands(tmp_path / "root", url=url, sha256=served[1])
        assert (tmp_path / "root.tar.gz.part").stat().st_size == 1024
        download_speech_commands(tmp_path / "root", url=url, sha256=served[1])
    finally:
        server.shutdown()
    assert ranges == [None, "bytes=1024-"] and leftovers(tmp_path) == ["root"]


def test_stale_part_without_range_support_is_restarted(served, tmp_path):
    (tmp_path / "root.tar.gz.part").write_bytes(b"garbage from an older run")
    (tmp_path / "root.tar.gz.abc123.part").write_bytes(b"older unique-named leftover")
    download_speech_commands(tmp_path / "root", url=served[0], sha256=served[1])  # file:// ignores Range
    assert leftovers(tmp_path) == ["root"]


def test_real_kill_mid_extraction(served, tmp_path):
    """SIGKILL (no finally blocks run) while extracting: the partial staging folder is never used, then removed."""
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
import train.data.download as dl
from train.data.speech_commands import download_speech_commands
real, count = dl._write_member, [0]
def write(*args):
    count[0] += 1
    if count[0] == 6:
        os.kill(os.getpid(), signal.SIGKILL)
    real(*args)
dl._write_member = write
download_speech_commands({str(tmp_path / "root")!r}, url={served[0]!r}, sha256={served[1]!r})
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert result.returncode == -signal.SIGKILL
    staging = [p for p in tmp_path.iterdir() if p.name.startswith(".root.extracting-")]
    assert staging and not (tmp_path / "root").exists()  # the kill left a partial folder, but not under the root's name
    with pytest.raises(FileNotFoundError, match="download=True"):
        build_dataset("speech_commands", "test", root=str(tmp_path / "root"), classes=35)
    download_speech_commands(tmp_path / "root", url=served[0], sha256=served[1])
    assert leftovers(tmp_path) == ["root"]


def test_unmarked_old_extraction_is_refused_not_used(tree, tmp_path):
    root = tmp_path / "root"
    (root / "yes").mkdir(parents=True)
    (root / "validation_list.txt").write_text("")  # what an interrupted older version left
    with pytest.raises(FileNotFoundError, match=MARKER):
        build_dataset("speech_commands", "test", root=str(root), download=False)
    with pytest.raises(FileExistsError, match="delete it") as info:
        download_speech_commands(root, url="file:///nonexistent", sha256="0" * 64)
    assert "\n" not in str(info.value) and (root / "validation_list.txt").exists()  # refused, nothing deleted


@pytest.mark.parametrize(
    "member",
    [("../evil.txt", b"x"), ("/tmp/evil_abs.txt", b"x"), ("a/../../evil.txt", b"x"),
     ("link", "symlink", "/etc/passwd"), ("link", "symlink", "../../outside"), ("hard", "hardlink", "../outside")],
)  # fmt: skip
def test_safe_extract_rejects_malicious_members(tmp_path, member):
    archive = tar_of(tmp_path, [("ok.txt", b"fine"), member])
    target = tmp_path / "out"
    with pytest.raises(ValueError, match="unsafe tar member"):
        safe_extract(archive, target)
    assert not (tmp_path / "evil.txt").exists() and not (target / "ok.txt").exists()  # checked before writing anything


def test_safe_extract_refuses_even_links_inside(tmp_path):
    archive = tar_of(tmp_path, [("a/data.txt", b"fine"), ("a/alias", "symlink", "data.txt")])
    with pytest.raises(ValueError, match="links are refused"):
        safe_extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_malicious_archive_end_to_end_writes_nothing_outside(tmp_path):
    """The CVE-2025-4517 layout through download_speech_commands with its own (matching) sha256."""
    import test_extract

    box = tmp_path / "box"
    box.mkdir()
    archive = test_extract.make(box / "poc.tar", test_extract.cve_2025_4517, mode="w", format=tarfile.PAX_FORMAT)
    with pytest.raises(ValueError, match="links are refused"):
        download_speech_commands(box / "root", url=Path(archive).as_uri(), sha256=sha256_of(archive))
    assert not (box / "escaped.txt").exists() and not (box / "root").exists()
