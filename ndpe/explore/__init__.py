"""``ndpe explore``: one self-contained page that shows how every encoding behaves, and a benchmark run's results.

    ndpe explore --out explorer                        # explorer/index.html
    ndpe explore --results benchmarks/results/standard --out explorer   # with the benchmark tab of that run

The page is one file: its styles, scripts and data are inline, so it opens from ``file://`` with no server and no
network. Every number on it is computed here by ndpe (:mod:`ndpe.explore.data`); the page's JavaScript only looks
them up and colours them with the figures' own colour maps (:mod:`ndpe.viz.style`), so no formula is written
twice. It needs the ``viz`` extra (matplotlib: the colour maps and the picture of the toy scene).

Views (tabs), in the order that teaches: growth (zoom or canvas, coordinates, scaling), RoPE angle dials, click a
query (two kinds side by side, 1D / 2D / 3D), axis decomposition (row + column terms, a mixing angle),
spectrogram (an encoding per axis; a longer clip against a pitch shift), bias receptive field (heads on one
scale, the -1 contour), and the benchmark (``--results``). The URL's ``#`` part holds the view's settings, so a
link opens a given picture: ``index.html#tab=growth&kind=rope&mode=zoom&grow=2&coords=pixel``.

``--results`` reads the run's ``explore.json`` (:data:`BENCH_FILE`): the numbers of the benchmark tab, which the
benchmark's report code (``train/explore.py``) writes beside report.md from the same ``results.csv`` (whose SHA-256
it records: a file older than the run's rows is refused), so the page agrees with that run's report.md and the
library never imports the benchmark's code. The page must stay under :data:`SIZE_BUDGET` bytes.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import json
import platform
import time
from pathlib import Path
from typing import Any, Callable

import torch

__all__ = ["BENCH_FILE", "SIZE_BUDGET", "build_data", "write_page"]

SIZE_BUDGET = 3_000_000
"""The most bytes ``index.html`` may have, the benchmark tab of a full run included."""
EXTRA = "pip install 'ndpe[viz]'"
_HERE = Path(__file__).parent


def require_matplotlib() -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise ModuleNotFoundError(f"ndpe explore needs matplotlib (its colour maps and the toy scene): {EXTRA}")


def scene_png(train_px: int = 96, growth: float = 3.0, seed: int = 0) -> str:
    """A toy picture of discs and squares, ``growth`` times the training field of view on each side, as a PNG
    data URI (the growth tab crops its top-left corner: the training picture for zoom, more of it for canvas)."""
    import matplotlib.image as mpimg

    size = round(train_px * growth)
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
    img = torch.ones(size, size, 3) * torch.tensor([0.93, 0.93, 0.9])
    palette = torch.tensor([[0.12, 0.47, 0.71], [1.0, 0.5, 0.05], [0.17, 0.63, 0.17], [0.84, 0.15, 0.16],
                            [0.58, 0.4, 0.74]])
    for i in range(int(4 * growth * growth)):
        cy, cx = (torch.rand(2, generator=g) * size).tolist()
        r = float(5 + torch.rand(1, generator=g) * 9)
        shape = (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r if i % 2 else ((xx - cx).abs() <= r) & ((yy - cy).abs() <= r)
        img[shape] = palette[i % len(palette)]
    buffer = io.BytesIO()
    mpimg.imsave(buffer, img.numpy(), format="png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


BENCH_FILE = "explore.json"
"""A run's benchmark-tab numbers in its results folder, written by its checkout's ``train/explore.py``."""


def _bench(results: Path) -> dict[str, Any]:
    """The benchmark tab's numbers: ``results/explore.json``, checked against the run's ``results.csv``."""
    csv, path = results / "results.csv", results / BENCH_FILE
    if not csv.is_file():
        raise FileNotFoundError(f"no results.csv in {results}: pass a benchmark run's folder (runs/NAME)")
    write = f"write it from a checkout of ndpe with: python -m train.explore {results}"
    if not path.is_file():
        raise FileNotFoundError(f"{results} has no {BENCH_FILE} (the benchmark tab's numbers, written with its "
                                f"report.md): {write}")
    try:
        bench = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path} is not valid JSON ({' '.join(str(e).split())}): {write}") from None
    if not isinstance(bench, dict) or bench.get("results_sha256") != hashlib.sha256(csv.read_bytes()).hexdigest():
        raise ValueError(f"{path} was not made from this results.csv (rows were added since): {write}")
    return {k: v for k, v in bench.items() if k != "results_sha256"}


Progress = Callable[[str], None]


def _stages(progress: Progress | None, total: int) -> Callable[[str, Callable[[], Any]], Any]:
    """``run(name, fn)``: ``fn()``, with a line to ``progress`` before it (``[i/total] name``) and after it
    (its seconds)."""
    count = 0

    def run(name: str, fn: Callable[[], Any]) -> Any:
        nonlocal count
        count += 1
        start = time.perf_counter()
        if progress is not None:
            progress(f"[{count}/{total}] {name} ...")
        out = fn()
        if progress is not None:
            progress(f"[{count}/{total}] {name}: {time.perf_counter() - start:.1f} s")
        return out

    return run


def build_data(results: Path | None = None, kinds: list[str] | None = None,
               progress: Progress | None = None) -> dict[str, Any]:
    """Every number the page draws (JSON-able). ``kinds``: a subset of the registered kinds (default: all);
    ``progress``: called with a line as each view's numbers start and end (``ndpe explore`` prints them)."""
    require_matplotlib()
    from .. import __version__
    from ..registry import available
    from . import codec, data

    kinds = list(available()) if kinds is None else kinds
    unknown = sorted(set(kinds) - set(available()))
    if unknown:
        raise ValueError(f"unknown kinds {unknown}: pick from {sorted(available())}")
    bench = None if results is None else _bench(Path(results))  # first: a wrong folder fails at once
    views = {"growth": ("growth maps", lambda: data.growth_data(kinds)), "dials": ("angle dials", data.dials_data),
             "compare": ("click-a-query maps", lambda: data.compare_data(kinds)),
             "axes": ("axis terms", data.axes_data),
             "spec": ("spectrogram maps", data.spectrogram_data), "bias": ("bias heads", lambda: data.bias_data(kinds))}
    stage = _stages(progress, len(views) + 1 + (bench is not None))
    with torch.no_grad():
        out = {"meta": {"ndpe": __version__, "torch": torch.__version__.split("+")[0], "dim": data.DIM,
                        "heads": data.HEADS, "python": platform.python_version(),
                        "command": "ndpe explore" + (f" --results {results}" if results is not None else ""),
                        "footer": "ndpe explorer: one page, no network. The settings are in the address (#...), "
                                  "so a link opens this picture."},
               "kinds": {k: v for k, v in data.kinds_table().items() if k in kinds},
               "cmaps": codec.colour_maps(), "content_note": data.content_note(),
               "scene": stage("toy scene", lambda: {"png": scene_png(), "train_px": 96})}
        for key, (name, fn) in views.items():
            out[key] = stage(name, fn)
    if bench is not None:
        from .charts import bench_charts

        bench["charts"] = stage("benchmark charts", lambda: bench_charts(bench))
    out["bench"] = bench
    return out


def render(payload: dict[str, Any]) -> str:
    """The page: the template with the styles, the script and the data inline (``</`` escaped in the data)."""
    blob = json.dumps(payload, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    page = (_HERE / "page.html").read_text()
    for marker, text in (("/*CSS*/", (_HERE / "explorer.css").read_text()),
                         ("/*JS*/", (_HERE / "explorer.js").read_text()), ("/*DATA*/", blob)):
        page = page.replace(marker, text, 1)
    return page


def write_page(out: Path, results: Path | None = None, kinds: list[str] | None = None,
               progress: Progress | None = None) -> Path:
    """Write ``out/index.html`` and return its path; refuses a page over :data:`SIZE_BUDGET` bytes. ``progress``:
    as :func:`build_data`."""
    page = render(build_data(results, kinds, progress))
    size = len(page.encode())
    if size > SIZE_BUDGET:
        raise ValueError(f"the explorer page is {size} bytes, over its budget of {SIZE_BUDGET}: fewer settings")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "index.html"
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(page)
    tmp.replace(path)  # never a half-written page
    return path
