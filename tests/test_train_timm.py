"""``model.name=timm``: train.main trains a timm ViT / EVA made positional by ``ndpe.timm.use`` (the drop-in path;
its kill / resume check is in tests/test_kill.py), and refuses a config it cannot build in one line."""
from __future__ import annotations

import copy

import pytest
import torch
from einops import rearrange

from ndpe.kinds.rope import RoPE
from ndpe.timm import NdpeAttention
from train.main import cli, fit, load_trained

from tests.test_train import fake_config

TIMM = ["model.name=timm", "model.timm_name=vit_tiny_patch16_224", "model.dim=16", "model.heads=2",
        "model.pe.kind=rope", "train.steps=2"]


def shuffle_patches(x, patch=4):
    """The image with its ``patch`` x ``patch`` tiles in reversed order: the same tokens at other positions."""
    tiles = rearrange(x, "b c (h p) (w q) -> b (h w) c p q", p=patch, q=patch).flip(1)
    return rearrange(tiles, "b (h w) c p q -> b c (h p) (w q)", h=x.shape[-2] // patch)


def test_trains_a_timm_model_with_its_ndpe_encoding(tmp_path):
    model, metrics = fit(fake_config(tmp_path, "image", *TIMM))
    assert metrics["step"] == 2
    timm_model = model.model
    assert isinstance(timm_model.ndpe_pe, RoPE) and timm_model.pos_embed is None  # ndpe's kind, not timm's table
    assert all(isinstance(blk.attn, NdpeAttention) for blk in timm_model.blocks)
    x = torch.randn(2, 3, 16, 16)
    sharp = copy.deepcopy(model).eval()
    with torch.no_grad():  # positions matter: without them the class token could not tell the tiles' order
        for blk in sharp.model.blocks:  # q and k scaled: attention sharp enough that positions move the output
            blk.attn.attn.qkv.weight[:32] *= 30
        moved = (sharp(x) - sharp(shuffle_patches(x))).abs().max()
    assert moved > 1e-2, moved
    loaded, _ = load_trained(tmp_path, "cpu")  # the checkpoint builds the same model back
    torch.testing.assert_close(loaded(x), model.eval()(x), rtol=0, atol=0)


@pytest.mark.parametrize("bad, says", [
    (["model.timm_name=null"], "needs model.timm_name"),
    (["model.timm_name=no_such_model"], "needs model.timm_name"),
    (["model.timm_name=resnet18"], "is not a timm VisionTransformer or Eva"),
    (["model.pe.augment=cape"], "no model.pe.augment"),
    (["model.pe.kind=none", "model.name=vit"], "has no option(s) ['timm_name']"),
    (["model.img_size=0"], "model.img_size must be >= 1"),
])
def test_a_bad_timm_config_is_refused_in_one_line(tmp_path, capsys, bad, says):
    argv = ["data.name=tests.test_train:fake", "data.allow_import=true", "data.options.kind=image", "model.depth=1",
            "train.device=cpu", f"train.out_dir={tmp_path}", *TIMM, *bad]
    with pytest.raises(SystemExit) as exit_:
        cli(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and says in err and err.count("\n") == 1, err
