"""``ndpe.mrope_positions`` equals transformers 5.23's ``get_rope_index`` of Qwen2-VL, Qwen2.5-VL (absolute time:
``second_per_grid_ts`` x ``tokens_per_second``) and Qwen3-VL (one-frame grids between timestamp tokens); the vision
towers' ``axial`` rope is ``from_hf_rope(vision_config)``; a tiny random Qwen2.5-VL with both ropes swapped for ndpe's,
fed ndpe's ids, gives the model's own hidden states."""
from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
from einops import rearrange

import ndpe
from tests.conftest import assert_tells_apart, sharpen_attention

pytest.importorskip("transformers")
pytestmark = pytest.mark.peers  # also run against the newest transformers and timm (scripts/test_peers.sh)
from transformers import Qwen2_5_VLConfig  # noqa: E402
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (  # noqa: E402
    Qwen2_5_VLModel, Qwen2_5_VLVisionRotaryEmbedding, apply_rotary_pos_emb_vision)
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel  # noqa: E402
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel  # noqa: E402
from transformers.vision_utils import get_vision_position_ids  # noqa: E402

TEXT, IMAGE, VIDEO = 0, 1, 2


def hf_index(model_cls, segments, merge=2, tokens_per_second=None):
    """HF's ``get_rope_index`` on a stand-in self for one sequence of ``segments`` (ndpe's form) -> ``(N, 3)``."""
    vision = SimpleNamespace(spatial_merge_size=merge, tokens_per_second=tokens_per_second)
    fake = SimpleNamespace(config=SimpleNamespace(vision_config=vision))
    fake.get_vision_position_ids = functools.partial(model_cls.get_vision_position_ids, fake)
    types, images, videos, seconds = [], [], [], []
    for seg in segments:
        if isinstance(seg, int):
            types += [TEXT] * seg
            continue
        t, h, w = seg[:3]
        is_video = len(seg) == 4 or (model_cls is not Qwen3VLModel and t > 1)
        types += [VIDEO if is_video else IMAGE] * (t * h * w // merge ** 2)
        (videos if is_video else images).append(list(seg[:3]))
        if is_video:
            seconds.append(seg[3] if len(seg) == 4 else 1.0)
    kwargs = {}
    if model_cls is Qwen2_5_VLModel and seconds:
        kwargs["second_per_grid_ts"] = torch.tensor(seconds)
    grid = (lambda g: torch.tensor(g) if g else None)
    ids = model_cls.get_rope_index(fake, torch.zeros(1, len(types), dtype=torch.long), torch.tensor([types]),
                                   grid(images), grid(videos), **kwargs)[0]
    return ids[:, 0].T  # (N, 3)


QWEN2 = [[3, (1, 8, 12), 4, (3, 4, 6), 2], [(1, 4, 4)], [5], [(2, 2, 2), (1, 6, 2), 1]]
QWEN25 = [[3, (1, 8, 12), 4, (3, 4, 6, 0.5), 2], [2, (4, 4, 4, 2.5), 1], [(2, 2, 2, 1.0), 3, (1, 2, 6)],
          [1, (5, 2, 2, 0.3), 1]]  # 0.3 s x 4 tokens/s = 1.2: time ids 0, 1, 2, 3, 4 floored from 1.2 steps


@pytest.mark.parametrize("segments", QWEN2, ids=str)
def test_equals_qwen2_vl_get_rope_index(segments):
    assert torch.equal(ndpe.mrope_positions(segments, spatial_merge=2), hf_index(Qwen2VLModel, segments))


@pytest.mark.parametrize("segments", QWEN25, ids=str)
def test_equals_qwen2_5_vl_absolute_time(segments):
    ours = ndpe.mrope_positions(segments, spatial_merge=2, tokens_per_second=4)
    assert torch.equal(ours, hf_index(Qwen2_5_VLModel, segments, tokens_per_second=4))


def test_equals_qwen3_vl_timestamped_frames():
    """Qwen3-VL splits a video into one-frame grids, each after its timestamp tokens."""
    frames = [(1, 4, 6)] * 3
    segments = [2, (1, 8, 8), 1] + [x for f in frames for x in (2, f)] + [3]
    assert torch.equal(ndpe.mrope_positions(segments, spatial_merge=2), hf_index(Qwen3VLModel, segments))


def test_absolute_time_ids_follow_seconds():
    """The same 4-frame clip at half the frame rate (twice the seconds per grid) gets time ids twice as far apart."""
    fast = ndpe.mrope_positions([(4, 2, 2, 0.5)], tokens_per_second=4)[:, 0].unique()
    slow = ndpe.mrope_positions([(4, 2, 2, 1.0)], tokens_per_second=4)[:, 0].unique()
    assert fast.tolist() == [0, 2, 4, 6] and slow.tolist() == [0, 4, 8, 12]


def original_get_rope_index(segments, merge=2, tokens_per_second=None):
    """The original Qwen2-VL / Qwen2.5-VL ``get_rope_index`` (transformers 4.x), ported on ndpe's segments: each text
    run and each vision grid starts at the previous part's largest id + 1 (``st_idx = llm_pos_ids_list[-1].max() +
    1``); vision ids are ``stack([t_index, h_index, w_index]) + text_len + st_idx``, ``t_index`` the frame index
    times ``second_per_grid_t * tokens_per_second``, floored (1 without seconds)."""
    tokens, grids = [], []  # the token stream (text 0, vision 1) and the vision grids in order
    for seg in segments:
        if isinstance(seg, int):
            tokens += [0] * seg
        else:
            grids.append(seg)
            tokens += [1] * (seg[0] * seg[1] * seg[2] // merge ** 2)
    llm_pos_ids_list, st = [], 0
    for seg in grids:
        ed = tokens.index(1, st)
        llm_grid_t, llm_grid_h, llm_grid_w = seg[0], seg[1] // merge, seg[2] // merge
        step = seg[3] * tokens_per_second if len(seg) == 4 else 1.0
        text_len = ed - st
        st_idx = llm_pos_ids_list[-1].max() + 1 if len(llm_pos_ids_list) > 0 else 0
        llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
        t_index = (torch.arange(llm_grid_t).view(-1, 1).expand(-1, llm_grid_h * llm_grid_w) * step).long().flatten()
        h_index = torch.arange(llm_grid_h).view(1, -1, 1).expand(llm_grid_t, -1, llm_grid_w).flatten()
        w_index = torch.arange(llm_grid_w).view(1, 1, -1).expand(llm_grid_t, llm_grid_h, -1).flatten()
        llm_pos_ids_list.append(torch.stack([t_index, h_index, w_index]) + text_len + st_idx)
        st = ed + llm_grid_t * llm_grid_h * llm_grid_w
    if st < len(tokens):
        st_idx = llm_pos_ids_list[-1].max() + 1 if len(llm_pos_ids_list) > 0 else 0
        llm_pos_ids_list.append(torch.arange(len(tokens) - st).view(1, -1).expand(3, -1) + st_idx)
    return torch.cat(llm_pos_ids_list, dim=1).T  # (N, 3)


LONG_VIDEOS = [[2, (8, 4, 4), 2], [3, (12, 8, 4), 1, (1, 4, 4), 2], [(6, 2, 6), 4], [1, (5, 4, 4), 1, (3, 2, 2), 3]]


@pytest.mark.parametrize("segments", LONG_VIDEOS, ids=str)
def test_videos_longer_than_wide_under_both_rules(segments):
    """More time steps than max(H, W) / merge: "offset" (default) is transformers 5.23's rule, whose text after the
    video reuses the video's time ids; "max" is the original rule, whose text starts past every id."""
    offset = ndpe.mrope_positions(segments, spatial_merge=2)
    assert torch.equal(offset, hf_index(Qwen2VLModel, segments))
    assert torch.equal(offset, hf_index(Qwen2_5_VLModel, segments, tokens_per_second=1))
    original = ndpe.mrope_positions(segments, spatial_merge=2, resume="max")
    assert torch.equal(original, original_get_rope_index(segments))
    assert not torch.equal(original, offset)


def test_the_issues_example():
    """``[2, (8, 4, 4), 2]``, merge 2: the video's time ids are 2..9; its text resumes at 4 (offset) or 10 (max)."""
    offset = ndpe.mrope_positions([2, (8, 4, 4), 2], spatial_merge=2)
    original = ndpe.mrope_positions([2, (8, 4, 4), 2], spatial_merge=2, resume="max")
    assert offset[2:-2, 0].unique().tolist() == list(range(2, 10))
    assert offset[-2:, 0].tolist() == [4, 5] and original[-2:].tolist() == [[10] * 3, [11] * 3]


@pytest.mark.parametrize("segments", QWEN25 + [[2, (6, 4, 4, 2.0), 3, (1, 4, 8)]], ids=str)
def test_max_rule_with_absolute_time_equals_the_original_code(segments):
    """With seconds per grid the time axis may hold the largest id: "max" resumes past it, as the 4.x code."""
    ours = ndpe.mrope_positions(segments, spatial_merge=2, tokens_per_second=4, resume="max")
    assert torch.equal(ours, original_get_rope_index(segments, tokens_per_second=4))


@pytest.mark.parametrize("segments", [[3, (1, 8, 12), 4], [(2, 4, 4), 1, (1, 2, 6)], [5]], ids=str)
def test_rules_agree_where_no_segment_passes_its_offset(segments):
    """Images and videos with at most max(H, W) / merge time steps: both rules give the same ids."""
    assert torch.equal(ndpe.mrope_positions(segments, spatial_merge=2),
                       ndpe.mrope_positions(segments, spatial_merge=2, resume="max"))


@pytest.mark.parametrize("segments,kwargs,err,match", [
    ([3], {"resume": "last"}, ValueError, "resume must be one of"),
    ([], {}, TypeError, "non-empty list"),
    ("abc", {}, TypeError, "non-empty list"),
    ([-1], {}, ValueError, "text run"),
    ([(1, 4)], {}, ValueError, r"\(T, H, W\)"),
    ([(0, 4, 4)], {}, ValueError, "positive int"),
    ([(1, 3, 4)], {"spatial_merge": 2}, ValueError, "does not divide"),
    ([(2, 4, 4, 1.0)], {}, ValueError, "needs tokens_per_second"),
    ([(2, 4, 4, -1.0)], {"tokens_per_second": 2}, ValueError, "seconds_per_grid must be"),
    ([3], {"spatial_merge": 0}, ValueError, "spatial_merge"),
    ([3], {"tokens_per_second": 0}, ValueError, "tokens_per_second must be"),
])
def test_refusals(segments, kwargs, err, match):
    with pytest.raises(err, match=match):
        ndpe.mrope_positions(segments, **kwargs)


def vision_config(**kw):
    return Qwen2_5_VLConfig(**kw).vision_config


@pytest.mark.parametrize("head_dim", [16, 80])
def test_vision_axial_rope_equals_hf(head_dim):
    """``rope_type: axial``: rows and columns each take head_dim / 2 channels of one theta series."""
    cfg = Qwen2_5_VLConfig(vision_config=dict(hidden_size=head_dim * 2, num_heads=2)).vision_config
    pe = ndpe.from_hf_rope(cfg)
    assert pe.dims == 2 and pe.axis_dims == (head_dim // 2, head_dim // 2)
    ids = get_vision_position_ids(torch.tensor([[1, 8, 12], [2, 4, 4]]), 2)  # (N, 2), merge-block order
    ref = Qwen2_5_VLVisionRotaryEmbedding(cfg)(torch.zeros(1), ids)
    ours = ndpe.hf_cos_sin(pe, ids)
    xy = pe.replace(grid_indexing="xy")  # the wrong option: columns on the first channels
    for a, b, c in zip(ours, ref, ndpe.hf_cos_sin(xy, ids)):
        assert_tells_apart(a, c, b, rtol=0, atol=1e-5)
    q, k = torch.randn(2, len(ids), 2, head_dim).unbind(0)  # HF's vision layout (N, heads, head_dim)

    def rotated(pe):
        pos = pe(positions=ids.float())
        return [rearrange(t, "h n d -> n h d") for t in ndpe.apply_qk(rearrange(q, "n h d -> h n d"),
                                                                      rearrange(k, "n h d -> h n d"), pos)]
    for a, b, c in zip(rotated(pe), apply_rotary_pos_emb_vision(q, k, *ref), rotated(xy)):
        assert_tells_apart(a, c, b, rtol=1e-5, atol=1e-5)
    # the ids themselves: row-major grid coordinates regrouped into merge x merge blocks
    grid = pe.coords((8, 12)).long()
    assert torch.equal(rearrange(grid, "(hb m1 wb m2) d -> (hb wb m1 m2) d", m1=2, m2=2, hb=4), ids[:96])


def test_axial_refusals():
    cfg = SimpleNamespace(head_dim=18, rope_parameters=dict(rope_type="axial", rope_theta=1e4))
    with pytest.raises(ValueError, match="divide by 4"):
        ndpe.from_hf_rope(cfg)
    pe = ndpe.from_hf_rope(SimpleNamespace(head_dim=16, rope_parameters=dict(rope_type="axial", rope_theta=1e4)))
    with pytest.raises(ValueError, match=r"\(N, 2\)"):
        ndpe.hf_cos_sin(pe, torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="'axial', 'default'"):
        ndpe.from_hf_rope(SimpleNamespace(head_dim=16, rope_parameters=dict(rope_type="su", rope_theta=1e4)))


class NdpeVisionRope(torch.nn.Module):
    """Stands in for ``visual.rotary_pos_emb``: ``(x, position_ids (N, 2))`` -> HF's ``(cos, sin)``."""

    def __init__(self, pe):
        super().__init__()
        self.pe = pe

    def forward(self, x, position_ids):
        return ndpe.hf_cos_sin(self.pe, position_ids)


def test_tiny_qwen2_5_vl_with_ndpe_ropes_and_ids(monkeypatch):
    """Text + image + text + video (absolute time) + text through a random 2-layer Qwen2.5-VL: ndpe's ids equal the
    model's own, and with ndpe's vision and text ropes the hidden states equal the model's."""
    torch.manual_seed(0)
    config = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2,
                         rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=[4, 6, 6])),
        vision_config=dict(depth=2, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=64,
                           patch_size=2, temporal_patch_size=2, spatial_merge_size=2, window_size=8,
                           fullatt_block_indexes=[1], tokens_per_second=2),
        image_token_id=60, video_token_id=61, vision_start_token_id=62)
    model = sharpen_attention(Qwen2_5_VLModel(config).eval())  # positions must matter (tests/conftest.py)
    image, video = (1, 8, 8), (2, 4, 8)  # 16 LLM tokens each after the 2 x 2 merge
    segments = [3, image, 2, (*video, 2.5), 2]  # 2.5 s per temporal grid x 2 tokens/s: time ids 0, 5
    types = [TEXT] * 3 + [IMAGE] * 16 + [TEXT] * 2 + [VIDEO] * 16 + [TEXT] * 2
    tokens = torch.randint(0, 60, (1, len(types)))
    tokens[0, torch.tensor(types) == IMAGE], tokens[0, torch.tensor(types) == VIDEO] = 60, 61
    patch = 3 * 2 * 2 * 2
    inputs = dict(input_ids=tokens, mm_token_type_ids=torch.tensor([types]),
                  pixel_values=torch.randn(64, patch), image_grid_thw=torch.tensor([image]),
                  pixel_values_videos=torch.randn(64, patch), video_grid_thw=torch.tensor([video]),
                  second_per_grid_ts=torch.tensor([2.5]))
    ids = ndpe.mrope_positions(segments, spatial_merge=2, tokens_per_second=2)
    with torch.no_grad():
        ref = model(**inputs).last_hidden_state
        hf_ids = model.get_rope_index(tokens, torch.tensor([types]), inputs["image_grid_thw"],
                                      inputs["video_grid_thw"], inputs["second_per_grid_ts"])[0]
        assert torch.equal(ids.T[:, None], hf_ids) and ids[-19:-2, 0].max() == 3 + 8 // 2 + 2 + 5
        model.rope_deltas = None
        model.visual.rotary_pos_emb = NdpeVisionRope(ndpe.from_hf_rope(config.vision_config))
        text_pe = ndpe.from_hf_rope(config.text_config)
        monkeypatch.setattr(model.language_model.rotary_emb, "forward",
                            lambda x, position_ids: ndpe.hf_cos_sin(text_pe, position_ids, dtype=x.dtype))
        out = model(**inputs, position_ids=ids.T[:, None]).last_hidden_state
        relative = ndpe.mrope_positions([3, image, 2, video, 2], spatial_merge=2)  # Qwen2-VL's time ids 0, 1
        other = model(**inputs, position_ids=relative.T[:, None]).last_hidden_state
    assert_tells_apart(out, other, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("segments,kwargs,match", [
    ([(2, 2, 2, 1.0)], {"tokens_per_second": 1e30}, r"time ids of video \(2, 2, 2, 1.0\) reach 0 \+ 1e\+30"),
    ([(1, 2, 2, 1.0)], {"tokens_per_second": 1e300}, "time ids of video"),  # 0 x inf in float32
    ([3, (3, 2, 2, 2.0)], {"tokens_per_second": 2.4e18}, r"reach 3 \+ 9.6e\+18"),
    ([3], {"start": 2 ** 63 - 2}, "run from start=9223372036854775806 to 9223372036854775808"),
])
def test_ids_past_int64_are_refused(segments, kwargs, match):
    """Ids that int64 cannot hold are refused in one line (they wrapped to -2**63)."""
    with pytest.raises(ValueError, match=rf"^[^\n]*{match}[^\n]*past int64's 9223372036854775807[^\n]*$"):
        ndpe.mrope_positions(segments, **kwargs)
    edge = ndpe.mrope_positions([(2, 1, 1, 1.0)], tokens_per_second=2.0 ** 62)  # the largest step float32 holds here
    assert edge[:, 0].tolist() == [0, 2 ** 62]
