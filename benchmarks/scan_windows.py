"""``ndpe.timm.use`` on timm's relative-bias families at their own size and after timm's own resize: for one model per
family (built tiny by ``scan_dropins.tiny_timm``, positional weights redrawn large by ``sharpen_positions``), the
largest ``|ndpe - timm|`` of the pooled features with the model's own kind (``relative`` / ``cpb``) and the gap of a
wrong option (no bias); then, after ``set_input_size`` on both (a new window, or a new image size), the same
difference and the gap of a wrong resize (a table clipped at the old window instead of timm's interpolation; an MLP
normalised by the old window where timm normalises by the new one, or by the new one where timm keeps the pretrained
one; no bias where an MLP of raw offsets has nothing to resize).

    PYTHONPATH=. python benchmarks/scan_windows.py
"""
from __future__ import annotations

import warnings

import torch

import ndpe.timm
from benchmarks.scan_dropins import sharpen_positions, tiny_timm

# (row, timm name and extra options, side, own kind, set_input_size arguments, side after, wrong resize)
FAMILIES = [
    ("Swin V1", ("swin_tiny_patch4_window7_224", {}), 64, "relative", {"img_size": (64, 64), "window_size": 8}, 64,
     "clip"),
    ("Swin V2", ("swinv2_tiny_window8_256", {}), 64, "cpb", {"img_size": (64, 64), "window_size": 8}, 64, (4, 4)),
    ("Swin V2, pretrained window 12", ("swinv2_base_window12to16_192to256", {}), 64, "cpb",
     {"img_size": (64, 64), "window_size": 8}, 64, None),
    ("BEiT, a table per block", ("beit_base_patch16_224", {}), 64, "relative", {"img_size": (96, 96)}, 96, "clip"),
    ("BEiT, one shared table", ("beit_base_patch16_224", {"use_rel_pos_bias": False, "use_shared_rel_pos_bias": True}),
     64, "relative", {"img_size": (96, 96)}, 96, "clip"),
    ("MaxViT bias", ("maxvit_nano_rw_256", {}), 128, "relative", {"img_size": (192, 192)}, 192, "clip"),
    ("MaxViT bias_tf", ("maxvit_tiny_tf_224", {}), 128, "relative", {"img_size": (192, 192)}, 192, "clip"),
    ("MaxViT mlp", ("maxvit_rmlp_nano_rw_256", {}), 128, "cpb", {"img_size": (192, 192)}, 192, "none"),
    ("CoAtNet bias", ("coatnet_nano_rw_224", {}), 64, "relative", {"img_size": (96, 96)}, 96, "clip"),
    ("ViT-RelPos mlp, class token", ("vit_relpos_medium_patch16_cls_224", {}), 64, "cpb", {"img_size": (96, 96)}, 96,
     "none"),
    ("ViT-RelPos mlp, shared", ("vit_srelpos_small_patch16_224", {}), 64, "cpb", {"img_size": (96, 96)}, 96, "none"),
    ("ViT-RelPos bias, class token", ("vit_relpos_base_patch16_cls_224", {"rel_pos_type": "bias"}), 64, "relative",
     {"img_size": (96, 96)}, 96, "clip"),
]


def build(model: tuple[str, dict], side: int):
    return sharpen_positions(tiny_timm(model[0], side, **model[1]))


def sites(model) -> list:
    return [m for m in model.modules() if getattr(m, "ndpe_pe", None) is not None]


def wrong_resize(name: tuple[str, dict], side: int, kind: str, how):
    """The model with ndpe's own kind, resized the wrong way ``how`` (see the module doc)."""
    if how == "none":
        return ndpe.timm.use(build(name, side), "none")
    model = ndpe.timm.use(build(name, side), kind)
    if how == "clip":  # the window follows, the table is not resized
        for site in sites(model):
            site.set_window_size = lambda size, site=site: setattr(site, "window_size", tuple(size))
    return model


@torch.no_grad()
def row(label: str, name: tuple[str, dict], side: int, kind: str, resize: dict, after: int, how) -> str:
    x = torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(0))
    y = torch.randn(2, 3, after, after, generator=torch.Generator().manual_seed(1))
    timm_model, model = build(name, side), ndpe.timm.use(build(name, side), kind)
    ref = timm_model(x)
    diff = (model(x) - ref).abs().max().item()
    gap = (ndpe.timm.use(build(name, side), "none")(x) - ref).abs().max().item()
    wrong = wrong_resize(name, side, kind, how)
    for m in (timm_model, model, wrong):
        m.set_input_size(**resize)
    if isinstance(how, tuple) or how is None:  # an MLP normalised by another window than timm's
        for site in sites(wrong):
            site.ndpe_pe = site.ndpe_pe.replace(train_shape=how)
    ref = timm_model(y)
    resized = (model(y) - ref).abs().max().item()
    resize_gap = (wrong(y) - ref).abs().max().item()
    windows = sorted({tuple(s.window_size) for s in sites(model)})
    return (f"| {label} | `{name[0]}` | `{kind}` | {len(sites(model))} | {diff:.2g} | {gap:.2g} | "
            f"{after} px, windows {', '.join('x'.join(map(str, w)) for w in windows)} | {resized:.2g} | "
            f"{resize_gap:.2g} |")


def main() -> None:
    import timm

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    print(f"timm {timm.__version__}, float32 CPU, pooled features of 2 images\n")
    print("| family | model | own kind | sites | own size: max diff | no bias: gap | resized to | resized: max diff "
          "| wrong resize: gap |")
    print("|---" * 9 + "|")
    for family in FAMILIES:
        print(row(*family))


if __name__ == "__main__":
    main()
