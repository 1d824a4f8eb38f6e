"""The drop-in scan (``benchmarks/scan_dropins.py``): every rotary decoder of the installed transformers and every timm
ViT-family model is either equal to ndpe's drop-in or refused by ndpe in one line; none is silently different and
none fails with another error. The default run checks a sample of the layouts (a few seconds); the full sweep, every
model (several minutes), is marked slow: ``pytest -m slow tests/test_scan_dropins.py``."""
from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("timm")
pytestmark = pytest.mark.peers

from benchmarks import scan_dropins as scan  # noqa: E402

# one decoder per layout (half, interleaved, complex, one cos per pair, partial, odd-free MoE), and the refusals:
# per-layer-type ropes, a flipped sign, fused projections without model.model
HF_SAMPLE = {"llama": "equal", "cohere": "equal", "llama4_text": "equal", "gpt_oss": "equal", "glm": "equal",
             "glm4_moe": "equal", "gemma3_text": "refused", "nanochat": "refused", "gpt_neox": "refused"}
TIMM_SAMPLE = {"vit_tiny_patch16_224": "equal", "eva02_tiny_patch14_224": "equal", "vit_small_patch16_rope_224": "equal",
               "beit_base_patch16_224": "equal", "swinv2_tiny_window8_256": "equal", "maxvit_rmlp_nano_rw_256": "equal",
               "vit_relpos_medium_patch16_cls_224": "equal", "swinv2_cr_tiny_ns_224": "refused"}


def decoders() -> dict[str, type]:
    return dict(scan.hf_decoders())


@pytest.mark.parametrize("model_type", list(HF_SAMPLE))
def test_hf_sample(model_type):
    row = scan.hf_row(model_type, decoders()[model_type])
    assert row.status == HF_SAMPLE[model_type], row


@pytest.mark.parametrize("name", list(TIMM_SAMPLE))
def test_timm_sample(name):
    row = scan.timm_row(name)
    assert row.status == TIMM_SAMPLE[name], row


@pytest.mark.slow
def test_every_hf_decoder_is_equal_or_refused():
    rows = [scan.hf_row(t, c) for t, c in scan.hf_decoders()]
    failing = [r for r in rows if r.status == "failing"]
    assert not failing, failing
    assert sum(r.status == "equal" for r in rows) >= 60, scan.summary("transformers", "", rows)


@pytest.mark.slow
def test_every_timm_vit_is_equal_or_refused():
    rows = [scan.timm_row(n) for n in scan.timm_models()]
    failing = [r for r in rows if r.status == "failing"]
    assert not failing, failing
