"""One scan of the drop-ins against the installed peers: every causal decoder of transformers whose modeling module
has a ``*RotaryEmbedding`` class, every timm ViT-family model with a ``pos_embed`` or a rope, and every timm model of
the relative-bias families (Swin V1 / V2, MaxViT and CoAtNet, BEiT).

Each transformers decoder is built tiny and random from its own config class (transformers' defaults, the sizes
shrunk), its attention sharpened (``tests.conftest.sharpen_attention``), and checked two ways: ``ndpe.from_hf_rope``
of its config against the model's own ``rotary_emb`` (cos/sin, in the model's form), and
``ndpe.hf.use(model, "rope")``'s logits against the model's own. Each timm model (``timm.list_models``, built tiny)
is checked through ``ndpe.timm.use(model, kind)`` with ``kind`` its own (``"learned"`` for a ``pos_embed``, ``"rope"``
for EVA's rope, ``"relative"`` for a bias table, ``"cpb"`` for a CPB MLP; those two families' positional weights
redrawn large, :func:`sharpen_positions`), against the model's own logits. A row is ``equal`` (within ``TOL``, and
the same model with a wrong option, theta 100 for a rope, no table for a ``pos_embed``, no bias for a relative-bias
model, more than 100 x ``TOL`` away), ``untold`` (within
``TOL``, but so is the wrong option: positions barely move this tiny model), ``unmapped`` (a timm rope that
``"rope"`` does not take over as the model's own: RoPE-Mixed learns frequencies per block), ``refused`` (ndpe raised one line:
``ValueError`` / ``TypeError`` from ndpe's code), ``failing`` (a difference past ``TOL``, or any other error) or
``not built`` (the tiny config or the peer's own forward failed: nothing of ndpe's was run).

    PYTHONPATH=. python benchmarks/scan_dropins.py [--hf] [--timm] [--only NAME ...]
"""
from __future__ import annotations

import argparse
import copy
import sys
import warnings
from dataclasses import dataclass

import torch

import ndpe

TOL = 1e-4
MAX_PARAMS = 20_000_000
STATUSES = ("equal", "untold", "refused", "unmapped", "failing", "not built")
# timm's rope modules whose rope ndpe.timm.use(model, "rope") takes over as the model's own (ndpe/timm.py _eva_rope)
MAPPED_ROPES = ("RotaryEmbeddingCat", "RotaryEmbeddingDinoV3")
TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=256, moe_intermediate_size=32,
            num_experts=4, n_routed_experts=4, num_local_experts=4, num_experts_per_tok=2, n_shared_experts=1,
            shared_expert_intermediate_size=32, n_group=1, topk_group=1, kv_lora_rank=16, q_lora_rank=16,
            qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, first_k_dense_replace=1, pad_token_id=0, bos_token_id=1, eos_token_id=2)


@dataclass
class Row:
    name: str
    status: str  # one of STATUSES
    diff: float = float("nan")  # largest |ndpe - peer| (logits, or cos/sin)
    gap: float = float("nan")  # the wrong option's distance from the peer
    note: str = ""


def one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0][:150] if str(err) else ''}"


def refused(err: BaseException) -> bool:
    """ndpe's refusal: a one-line ``ValueError`` / ``TypeError`` raised in ndpe's code (anything else is a failure)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    raised_in_ndpe = tb is not None and "/ndpe/" in tb.tb_frame.f_code.co_filename
    return isinstance(err, (ValueError, TypeError)) and "\n" not in str(err) and raised_in_ndpe


def hf_decoders() -> list[tuple[str, type]]:
    """``(model_type, *ForCausalLM class)`` of every causal decoder whose modeling module has a rotary embedding."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    found = []
    for model_type, name in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()):
        try:
            cls = getattr(transformers, name if isinstance(name, str) else name[0])
        except Exception:  # an optional dependency missing: transformers cannot import it either
            continue
        module = sys.modules[cls.__module__]
        if any(n.endswith("RotaryEmbedding") for n in vars(module)):
            found.append((model_type, cls))
    return found


def tiny_decoder(cls: type) -> torch.nn.Module:
    from tests.conftest import sharpen_attention

    defaults = cls.config_class()
    tiny = {k: v for k, v in TINY.items() if hasattr(defaults, k)}
    if hasattr(defaults, "qk_rope_head_dim"):  # multi-head latent attention: its head_dim is its own sum
        tiny.pop("head_dim", None)
    config = cls.config_class(**tiny)
    with torch.device("meta"):  # sizes the shrinking missed (a submodule's own width) would build a large model
        size = sum(p.numel() for p in cls(config).parameters())
    if size > MAX_PARAMS:
        raise ValueError(f"the tiny config still builds {size / 1e6:.0f}M parameters")
    torch.manual_seed(0)
    model = cls(config).eval()
    try:
        return sharpen_attention(model)
    except AssertionError:  # fused projections sharpen_attention does not know: the model as built
        return model


def hf_row(model_type: str, cls: type) -> Row:
    from ndpe.hf_rotary import ModelRotary

    try:
        model = tiny_decoder(cls)
        inner = getattr(model, "model", model)
        ids = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            ref = model(ids, use_cache=False).logits
        pristine = copy.deepcopy(model)
    except Exception as err:
        return Row(model_type, "not built", note=one_line(err))
    try:
        rotary = ModelRotary(inner)
        pe, rope_diff = ndpe.from_hf_rope(model.config), 0.0
        if not isinstance(pe, dict):  # one rope per layer type: ndpe.hf.use refuses it below
            own, mine = rotary.own(rotary._x(), rotary.ids), rotary.cos_sin(pe, rotary.ids)
            rope_diff = max((a - b).abs().max().item() for a, b in zip(_parts(mine), _parts(own)))
        with torch.no_grad():
            out = ndpe.hf.use(model, "rope")(ids, use_cache=False).logits
            other = ndpe.hf.use(copy.deepcopy(pristine), "rope", theta=100.0)(ids, use_cache=False).logits
    except Exception as err:
        return Row(model_type, "refused" if refused(err) else "failing", note=one_line(err))
    diff, gap = (out - ref).abs().max().item(), (other - ref).abs().max().item()
    scale = 1 + ref.abs().max().item()
    return verdict(model_type, diff, gap, scale, rope_diff)


def verdict(name: str, diff: float, gap: float, scale: float, rope_diff: float = 0.0) -> Row:
    """``equal`` within ``TOL`` (``untold`` where the wrong option is not 100 x ``TOL`` away either), else ``failing``."""
    if diff > TOL * scale or rope_diff > 1e-5:
        return Row(name, "failing", max(diff, rope_diff), gap, f"logits {diff:.2g}, cos/sin {rope_diff:.2g}")
    if gap <= 100 * TOL * scale:
        return Row(name, "untold", diff, gap, "equal, but the wrong option is as close: positions barely matter")
    return Row(name, "equal", max(diff, rope_diff), gap)


def _parts(out) -> list[torch.Tensor]:
    return [out.real, out.imag] if isinstance(out, torch.Tensor) and out.is_complex() else [t.float() for t in out]


# a wrong option for each timm kind: another theta, no table or bias, positions where the model has none
WRONG: dict[str, tuple] = {"rope": ("rope", {"theta": 100.0}), "learned": ("none", {}), "none": ("sinusoidal", {}),
                           "relative": ("none", {}), "cpb": ("none", {})}
WINDOWED = ("swin", "maxvit", "maxxvit", "coatnet")  # timm's relative-bias families without a patch embedding's grid


def timm_models() -> list[str]:
    """timm's ViT-family models (VisionTransformer, Eva and their subclasses) and its relative-bias families (Swin V1 /
    V2, MaxViT and CoAtNet, BEiT), one name per architecture."""
    import timm

    return sorted({name.split(".")[0] for name in timm.list_models()
                   if name.startswith(("vit_", "deit", "eva", "flexivit", "beit", "samvit") + WINDOWED)})


def tiny_timm(name: str, side: int, **extra):
    """``name`` at 2 blocks and ``side`` px, 64 wide where its widths are free, pooled features out (no head: timm
    initialises some heads near 0); Swin at 2 stages of windows 4, MaxViT / CoAtNet at 4 stages of 1 block; ``extra``
    to ``timm.create_model`` too."""
    import timm

    torch.manual_seed(0)
    if name.startswith(("swin_", "swinv2_")):
        return timm.create_model(name, pretrained=False, num_classes=0, img_size=side, embed_dim=32, depths=(2, 2),
                                 num_heads=(2, 4), window_size=4, **extra).eval()
    if name.startswith(WINDOWED):  # MaxxVit: its config overlaid
        return timm.create_model(name, pretrained=False, num_classes=0, img_size=side, depths=(1, 1, 1, 1),
                                 embed_dim=(64, 64, 64, 64), **extra).eval()
    try:
        return timm.create_model(name, pretrained=False, num_classes=0, depth=2, img_size=side, embed_dim=64,
                                 num_heads=4, **extra).eval()
    except Exception:  # a model whose widths are tied to its own (SigLIP's head): at its width
        torch.manual_seed(0)
        return timm.create_model(name, pretrained=False, num_classes=0, depth=2, img_size=side, **extra).eval()


@torch.no_grad()
def sharpen_positions(model: torch.nn.Module) -> torch.nn.Module:
    """A relative-bias model whose positions matter: attention sharpened (``tests.conftest.sharpen_attention``), every
    bias table redrawn N(0, 1) (BEiT's start at 0), every CPB MLP's linears with std ``2 / sqrt(fan_in)`` (timm's init
    makes ``16 sigmoid`` nearly constant), the residual post-norms of Swin V2 and ViT-RelPos's ``rpn`` models (0 or
    ``init_values`` at init) at 1."""
    from tests.conftest import sharpen_attention

    try:
        sharpen_attention(model)
    except AssertionError:  # no fused qkv / proj (CoAtNet's conv attention): its own init
        pass
    for m in model.modules():
        table = getattr(m, "relative_position_bias_table", None)
        if isinstance(table, torch.nn.Parameter):
            table.normal_()
        mlp = getattr(m, "cpb_mlp", None) or (m.mlp if type(m).__name__ == "RelPosMlp" else None)
        for linear in [] if mlp is None else [x for x in mlp.modules() if isinstance(x, torch.nn.Linear)]:
            linear.weight.normal_(0.0, 2.0 / linear.weight.shape[1] ** 0.5)
        if type(m).__name__ in ("SwinTransformerV2Block", "ResPostRelPosBlock"):  # post-norms near 0 at init
            m.norm1.weight.fill_(1.0)
            m.norm2.weight.fill_(1.0)
    return model.eval()


def own_kind(model: torch.nn.Module) -> str:
    """The kind ``ndpe.timm.use`` takes as the model's own: ``cpb`` for a CPB MLP, ``relative`` for a bias table,
    ``rope`` for EVA's rope, ``learned`` for a ``pos_embed``, else ``none``."""
    if any(hasattr(m, "cpb_mlp") or type(m).__name__ == "RelPosMlp" for m in model.modules()):
        return "cpb"
    if any(isinstance(getattr(m, "relative_position_bias_table", None), torch.nn.Parameter) for m in model.modules()):
        return "relative"
    if getattr(model, "rope", None) is not None:
        return "rope"
    return "learned" if getattr(model, "pos_embed", None) is not None else "none"


def timm_row(name: str) -> Row:
    import ndpe.timm  # noqa: F401
    from tests.conftest import sharpen_attention

    try:
        model = tiny_timm(name, 64)
        side = 64 if name.startswith(WINDOWED) else 4 * model.patch_embed.patch_size[0]  # a size every patch divides
        if side != 64:
            model = tiny_timm(name, side)
        if name.startswith(WINDOWED + ("beit", "vit_relpos", "vit_srelpos")):
            sharpen_positions(model)
        else:
            try:
                sharpen_attention(model)
            except AssertionError:  # projections sharpen_attention does not know: the model as built
                pass
        rope = getattr(model, "rope", None)
        if rope is not None and type(rope).__name__ not in MAPPED_ROPES:
            return Row(name, "unmapped", note=f"{type(rope).__name__}: ndpe.timm.use's kinds replace it")
        kind = own_kind(model)
        x = torch.randn(2, 3, side, side, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            ref = model(x)
        pristine = copy.deepcopy(model)
    except Exception as err:
        return Row(name, "not built", note=one_line(err))
    try:
        with torch.no_grad():
            out = ndpe.timm.use(model, kind)(x)
            other = ndpe.timm.use(pristine, *WRONG[kind][:1], **WRONG[kind][1])(x)
    except Exception as err:
        return Row(name, "refused" if refused(err) else "failing", note=one_line(err))
    return verdict(name, (out - ref).abs().max().item(), (other - ref).abs().max().item(), 1 + ref.abs().max().item())


def summary(library: str, version: str, rows: list[Row]) -> str:
    counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
    largest = max((r.diff for r in rows if r.status == "equal"), default=float("nan"))
    smallest_gap = min((r.gap for r in rows if r.status == "equal"), default=float("nan"))
    return (f"| {library} {version} | {len(rows)} | " + " | ".join(str(c) for c in counts.values())
            + f" | {largest:.2g} | {smallest_gap:.2g} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hf", action="store_true", help="scan transformers only")
    parser.add_argument("--timm", action="store_true", help="scan timm only")
    parser.add_argument("--only", nargs="*", help="model types / timm names to scan")
    parser.add_argument("--rows", action="store_true", help="print every row, not only the ones not equal")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    tables = []
    if not args.timm:
        import transformers

        rows = [hf_row(t, c) for t, c in hf_decoders() if not args.only or t in args.only]
        tables.append(("transformers", transformers.__version__, rows))
    if not args.hf:
        import timm

        rows = [timm_row(n) for n in timm_models() if not args.only or n in args.only]
        tables.append(("timm", timm.__version__, rows))
    for library, _, rows in tables:
        print(f"\n{library}: rows not equal" if not args.rows else f"\n{library}: every row")
        for r in rows:
            if args.rows or r.status != "equal":
                print(f"  {r.name:32s} {r.status:9s} diff {r.diff:.2g} gap {r.gap:.2g} {r.note}")
    print("\n| peer | models | " + " | ".join(STATUSES) + " | largest diff (equal) | smallest wrong-option gap (equal) |")
    print("|---" * (len(STATUSES) + 4) + "|")
    for library, version, rows in tables:
        print(summary(library, version, rows))


if __name__ == "__main__":
    main()
