"""The real-data preset end to end, as a user runs it: ``python -m train.bench --config configs/bench/real.yaml
data_root=... download=true`` into an empty data folder, on tiny archives in the exact on-disk formats (CIFAR-10's
python pickles behind torchvision's own download, Speech Commands v0.02's WAV tree behind ndpe's), served over a
local HTTP server. Only the sizes are shrunk (kinds, seeds, steps, model) by overrides on the command line."""
from __future__ import annotations

import functools
import hashlib
import tarfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

import train.data.cifar as cifar
import train.data.speech_commands as speech
from tests.test_data_cifar import LABEL_NAMES, py2_pickle
from tests.test_data_speech import write_tree
from train.bench import main as bench_main
from train.data.download import MARKER, sha256_of
from train.results import read_rows

PER_BATCH, TEST = 1002, 20  # 5,010 training images: the official val_size (5,000) leaves 10 to train on


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """An HTTP server over a folder with ``cifar-10-python.tar.gz`` and ``speech_commands_v0.02.tar.gz``;
    yields (base url, the CIFAR loader class with the fixture's md5s, the speech archive's sha256)."""
    src = tmp_path_factory.mktemp("src")
    web = tmp_path_factory.mktemp("web")
    folder = src / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        n = TEST if name == "test_batch" else PER_BATCH
        batch = {"batch_label": name, "labels": rng.integers(0, 10, n).tolist(),
                 "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "filenames": [f"{i}.png" for i in range(n)]}
        (folder / name).write_bytes(py2_pickle(batch))
    (folder / "batches.meta").write_bytes(py2_pickle({"num_cases_per_batch": PER_BATCH, "label_names": LABEL_NAMES,
                                                      "num_vis": 3072}))
    md5 = {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    with tarfile.open(web / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(folder, arcname="cifar-10-batches-py")
    words = src / "speech"
    write_tree(words)
    with tarfile.open(web / "speech_commands_v0.02.tar.gz", "w:gz") as tar:
        for file in sorted(words.rglob("*")):
            if file.name != MARKER:
                tar.add(file, arcname="./" + file.relative_to(words).as_posix(), recursive=False)
    server = QuietServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(web)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"

    class ServedCIFAR10(cifar.torchvision.datasets.CIFAR10):
        url = f"{base}/cifar-10-python.tar.gz"
        tgz_md5 = hashlib.md5((web / "cifar-10-python.tar.gz").read_bytes()).hexdigest()
        train_list = [[n, md5[n]] for n in names[:5]]
        test_list = [["test_batch", md5["test_batch"]]]
        meta = {"filename": "batches.meta", "key": "label_names", "md5": md5["batches.meta"]}

    yield base, ServedCIFAR10, sha256_of(web / "speech_commands_v0.02.tar.gz")
    server.shutdown()


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):  # a client that reads the headers only (torchvision's probe)
        pass


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no request lines in the test output
        pass


SHRINK = ["kinds=[none,rope]", "seeds=[0]", "default_steps=2", "batch_size=4", "warmup_steps=0", "dim=16", "depth=1",
          "heads=2", "workers=1", "device=cpu",
          "tasks=[image/cifar10,audio/speech_commands]"]  # MNIST's download: tests/test_data_mnist.py (a local mirror)


@pytest.fixture
def served_urls(served, monkeypatch):
    base, loader, digest = served
    monkeypatch.setattr(cifar, "TorchvisionCIFAR10", loader)
    monkeypatch.setattr(speech, "URL", f"{base}/speech_commands_v0.02.tar.gz")
    monkeypatch.setattr(speech, "SHA256", digest)
    monkeypatch.delenv("NDPE_DATA", raising=False)


@pytest.mark.timeout(900)
def test_real_preset_downloads_and_runs_end_to_end(served_urls, tmp_path, capsys):
    data, runs = tmp_path / "data", tmp_path / "runs"
    argv = ["--config", "configs/bench/real.yaml", f"data_root={data}", f"out_root={runs}", *SHRINK]
    with pytest.raises(SystemExit) as missing:  # without download=true: one line that names the fetch command
        bench_main(argv)
    assert missing.value.code == 2
    err = capsys.readouterr().err
    assert "download=true" in err and "Traceback" not in err and not any(data.glob("*/*"))
    report = bench_main([*argv, "download=true"])
    assert sorted(p.name for p in data.iterdir() if not p.name.startswith(".")) == [
        "cifar-10-batches-py", "cifar-10-python.tar.gz", "speech_commands_v0.02"]
    assert (data / "speech_commands_v0.02" / MARKER).is_file()
    rows = read_rows(runs / "real" / "results.csv")
    for task, sizes in (("image/cifar10", {"32px", "48px", "64px"}), ("audio/speech_commands", {"1s", "1.5s", "2s"})):
        tested = {(r.kind, r.variant, r.test_size) for r in rows if r.task == task and r.split == "test"}
        assert {s for k, v, s in tested if k == "none"} == sizes
        assert {v for k, v, s in tested if k == "rope"} == {"-", "pi", "ntk", "yarn"}
        assert any(r.kind == "floor" for r in rows if r.task == task)
    text = report.read_text()
    assert "image/cifar10" in text and "audio/speech_commands" in text and "_background_noise_" in text
    # the second command a user runs (the same one) finds every cell done and the data in place: nothing downloaded
    assert bench_main([*argv]) == report


DEAD = "http://127.0.0.1:9"  # the discard port: nothing listens there, so every fetch is refused at once, as offline


@pytest.mark.parametrize("task", ["image/cifar10", "audio/speech_commands", "image/mnist-zoom"])
def test_download_without_network_is_one_line(task, tmp_path, monkeypatch, capsys):
    """``download=true`` with no network: exit 2, one line naming the URL and where to put the files by hand; nothing
    written in the data folder (no archive, no .part) or the run folder."""
    import train.data.mnist as mnist

    class OfflineCIFAR10(cifar.torchvision.datasets.CIFAR10):
        url = f"{DEAD}/cifar-10-python.tar.gz"

    class OfflineMNIST(mnist.torchvision.datasets.MNIST):
        mirrors = [f"{DEAD}/mnist/"]

    monkeypatch.setattr(cifar, "TorchvisionCIFAR10", OfflineCIFAR10)
    monkeypatch.setattr(mnist, "TorchvisionMNIST", OfflineMNIST)
    monkeypatch.setattr(speech, "URL", f"{DEAD}/speech_commands_v0.02.tar.gz")
    monkeypatch.delenv("NDPE_DATA", raising=False)
    monkeypatch.delenv(mnist.ENV, raising=False)
    data, runs = tmp_path / "data", tmp_path / "runs"
    argv = ["--config", "configs/bench/real.yaml", f"data_root={data}", f"out_root={runs}", *SHRINK, f"tasks=[{task}]",
            "download=true"]
    with pytest.raises(SystemExit) as failed:
        bench_main(argv)
    assert failed.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert DEAD in err and str(data) in err and "could not" in err, err
    assert not [p for p in data.rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    assert not runs.exists()
