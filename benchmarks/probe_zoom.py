"""Why do ViTs trained at 32 px fail on larger images? Zoom vs canvas growth, per position encoding.

Trains the reference ViT (``models/vit.py``: dim 48, depth 2, heads 4, patch 4, mean pooling,
batch 32, AdamW lr 2e-3, 30 warmup steps, 300 steps, one seed) at 32 px through ``train.main.fit``
on ``digits`` or ``shapes`` once per kind, then reports test accuracy at 32 / 48 / 64 px in both
growth modes (``zoom``: the same scene at a higher resolution; ``canvas``: a larger field, same
object size). At 32 px both modes give identical items, so one trained model serves both.

Extra rows separate the causes of a zoom collapse:

- ``rope+PI``: the trained ``rope`` model evaluated with position interpolation
  (``scaling="linear", scale=S/32``): the 64 px grid then spans the trained position range.
  ``rope-mixed+PI``: the same for rope-mixed (its learned frequencies divided by S/32).
- ``learned`` uses ``resize="bicubic"`` (the table is interpolated to the larger grid), so under
  zoom its positions also stay in the trained range.
- ``none`` has no position information at all: whatever it loses under zoom is a content change
  (each 4x4 patch covers a smaller part of the object), not a position one.
- ``learned-x50``: the learned table initialised at std 1.0 (50x timm's 0.02; the patch embedding's
  output has per-channel std ~0.3-0.6 at init), monkeypatched, to see whether the table trains.
  For every ``learned*`` run the table's norm at init and after training is printed.

``--data digits-nearest`` upsamples with nearest: at 32 and 64 px every 4x4 patch is one constant digit
pixel, so the patch embedding sees nothing new at zoom 64 (content held fixed), only more tokens.

``--grid`` saves a PNG of test items 0-7 at 32 / 48 / 64 px in both modes (to check the images).

Run (CPU, about 20-40 s per trained kind on one thread)::

    OMP_NUM_THREADS=1 python benchmarks/probe_zoom.py --data digits
    OMP_NUM_THREADS=1 python benchmarks/probe_zoom.py --data shapes --kinds none learned sinusoidal rope rope-mixed
    OMP_NUM_THREADS=1 python benchmarks/probe_zoom.py --data digits --train-options '{"growth": "canvas", "digit_size": 24}'
    OMP_NUM_THREADS=1 python benchmarks/probe_zoom.py --data digits-nearest --kinds none learned rope rope-mixed coord
    OMP_NUM_THREADS=1 python benchmarks/probe_zoom.py --data digits --grid /tmp/digits.png --kinds
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ndpe  # noqa: E402
from ndpe.kinds.learned import Learned  # noqa: E402
from train.config import load_config  # noqa: E402
from train.data import build_dataset  # noqa: E402
from train.data.digits import Digits  # noqa: E402
from train.main import evaluate_model, fit  # noqa: E402

KINDS = {  # name -> (ndpe kind, options)
    "none": ("none", {}),
    "learned": ("learned", {"grid_shape": [8, 8], "resize": "bicubic"}),
    "learned-x50": ("learned", {"grid_shape": [8, 8], "resize": "bicubic"}),
    "sinusoidal": ("sinusoidal", {}),
    "rope": ("rope", {}),
    "rope-pixel": ("rope", {"coords": "pixel"}),
    "rope-mixed": ("rope-mixed", {}),
    "coord": ("coord", {}),
}
SIZES = (32, 48, 64)


class NearestDigits(Digits):
    """``digits`` upsampled with nearest instead of bilinear: at 32 and 64 px (4x and 8x) every 4x4 patch is
    one constant digit pixel, so zoom 64 shows the patch embedding nothing new (48 px: 6x, patches straddle)."""

    def __getitem__(self, index: int):
        digit = torch.from_numpy(self.images[index])[None, None]
        side = self.image_size if self.growth == "zoom" else self.digit_size
        digit = torch.nn.functional.interpolate(digit, size=(side, side), mode="nearest")[0, 0]
        image = digit if self.growth == "zoom" else torch.zeros(self.image_size, self.image_size)
        if self.growth == "canvas":
            r, c = self.offset(index)
            image[r:r + side, c:c + side] = digit
        return ((image - 0.5) / 0.5).expand(self.channels, -1, -1).contiguous(), int(self.labels[index])


def nearest_digits(split: str, *, seed: int = 0, root=None, **opts) -> NearestDigits:
    """Factory for ``data.name="benchmarks.probe_zoom:nearest_digits"``."""
    return NearestDigits(split, seed=seed, **opts)


DATA = {"digits": "digits", "shapes": "shapes", "digits-nearest": "benchmarks.probe_zoom:nearest_digits"}


def train(data: str, name: str, steps: int, seed: int, out_dir: str, data_options: dict | None = None):
    kind, options = KINDS[name]
    overrides = [
        f"data.name={DATA[data]}", "data.allow_import=true", f"model.pe.kind={kind}",
        "model.dim=48", "model.depth=2", "model.heads=4", "model.patch_size=4", "model.pool=mean",
        "train.batch_size=32", "optim.lr=2e-3", "optim.warmup_steps=30", f"train.steps={steps}",
        f"train.seed={seed}", "train.device=cpu", "train.amp=false", f"train.out_dir={out_dir}",
        "train.log_every=100000",
    ]
    cfg = load_config("configs/image_shapes.yaml", overrides)
    cfg.model.pe.options = dict(options)
    cfg.data.options = {"image_size": 32, **(data_options or {})}  # growth set at evaluation unless given here
    init_std = 1.0 if name == "learned-x50" else None
    original = Learned.reset_parameters
    if init_std is not None:
        def reset(self, std=init_std):
            for p in self.parameters():
                torch.nn.init.trunc_normal_(p, std=std, a=-2 * std, b=2 * std)
        Learned.reset_parameters = reset
    try:
        torch.manual_seed(seed)
        model, _ = fit(cfg)
    finally:
        Learned.reset_parameters = original
    return model, cfg


def table_rms(model) -> float:
    """RMS of the learned table (init: about its init std, 0.02 or 1.0)."""
    return model.encoder.pe.table.detach().pow(2).mean().sqrt().item()


def patch_scale(model, data: str) -> float:
    data = "shapes" if data == "shapes" else "digits"
    x = torch.stack([build_dataset(data, "test", **({"size": 64} if data == "shapes" else {}))[i][0] for i in range(64)])
    with torch.no_grad():
        return model.patch_embed(x).std().item()


def set_interpolation(model, name: str, factor: float) -> None:
    """Position interpolation at test time: positions divided by ``factor`` (rope / rope-mixed)."""
    pe = model.encoder.pe
    if name == "rope":
        model.encoder.pe = ndpe.make(dims=2, kind="rope", dim=pe.dim, heads=pe.heads,
                                     **({"scaling": "linear", "scale": factor} if factor > 1 else {}))
    elif name == "rope-mixed":
        if not hasattr(pe, "_freqs0"):
            pe._freqs0 = pe.freqs.detach().clone()
        with torch.no_grad():
            pe.freqs.copy_(pe._freqs0 / factor)


def evaluate_all(model, cfg, data: str, name: str) -> dict:
    extra = {"size": 512} if data == "shapes" else {}
    rows = {name: {}}
    if name in ("rope", "rope-mixed"):
        rows[f"{name}+PI"] = {}
    for growth in ("zoom", "canvas"):
        for s in SIZES:
            acc = evaluate_model(model, cfg, split="test", image_size=s, growth=growth, **extra)["acc"]
            rows[name][f"{growth}{s}"] = acc
            if f"{name}+PI" in rows:
                set_interpolation(model, name, s / 32)
                rows[f"{name}+PI"][f"{growth}{s}"] = evaluate_model(model, cfg, split="test", image_size=s,
                                                                    growth=growth, **extra)["acc"]
                set_interpolation(model, name, 1.0)
    return rows


def save_grid(data: str, path: str, n: int = 8) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = [(g, s) for g in ("zoom", "canvas") for s in SIZES]
    fig, axes = plt.subplots(n, len(cols), figsize=(1.6 * len(cols), 1.6 * n))
    for j, (g, s) in enumerate(cols):
        if data == "digits-nearest":
            ds = NearestDigits("test", image_size=s, growth=g)
        else:
            ds = build_dataset(data, "test", image_size=s, growth=g, **({"size": n} if data == "shapes" else {}))
        for i in range(n):
            x, y = ds[i]
            axes[i, j].imshow((x * 0.5 + 0.5).clamp(0, 1).permute(1, 2, 0).numpy(), interpolation="nearest")
            axes[i, j].set_title(f"{g} {s} y={y}", fontsize=7)
            axes[i, j].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="digits", choices=tuple(DATA))
    p.add_argument("--kinds", nargs="*", default=["none", "learned", "learned-x50", "sinusoidal", "rope",
                                                   "rope-pixel", "rope-mixed", "coord"])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--grid", default=None, help="save a PNG grid of test items to this path")
    p.add_argument("--train-options", default="{}", help='dataset options of training and evaluation (JSON), e.g. '
                   '\'{"growth": "canvas", "digit_size": 24}\': then canvas items are 24 px digits at random offsets')
    p.add_argument("--json", default=None, help="write the table as JSON to this path")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.grid:
        save_grid(args.data, args.grid)
        print(f"saved {args.grid}")
    table = {}
    for name in args.kinds:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as out:
            model, cfg = train(args.data, name, args.steps, args.seed, out, json.loads(args.train_options))
        model.eval()
        rows = evaluate_all(model, cfg, args.data, name)
        table.update(rows)
        note = ""
        if name.startswith("learned"):
            init = 1.0 if name == "learned-x50" else 0.02
            note = f"  table rms init ~{init:.2f} -> trained {table_rms(model):.3f}; patch-embed output std {patch_scale(model, args.data):.3f}"
        print(f"{name:14s} " + " ".join(f"{k}={v:.3f}" for k, v in rows[name].items())
              + f"  ({time.perf_counter() - t0:.0f}s){note}", flush=True)
        for extra_row in set(rows) - {name}:
            print(f"{extra_row:14s} " + " ".join(f"{k}={v:.3f}" for k, v in rows[extra_row].items()), flush=True)
    cols = [f"{g}{s}" for g in ("zoom", "canvas") for s in SIZES]
    print(f"\n{args.data} {args.train_options}, {args.steps} steps, seed {args.seed}, test accuracy "
          "(default options: zoom32 == canvas32, the same items)")
    print("| kind | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols))
    for name, row in table.items():
        print(f"| {name} | " + " | ".join(f"{row[c]:.3f}" for c in cols) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
