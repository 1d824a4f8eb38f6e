"""The effects the papers behind the benchmark's claims report (train/protocol.py ``CLAIMS``), per half of a claim,
in that claim's measure: a difference of worsening from the training size (accuracy, or log perplexity), or at the
training size for an in-distribution claim. Each comes with its source (the paper's table or figure and the numbers
compared). A half the paper does not measure at a comparable size is left out: its power reads "not stated". The
claims in :data:`NOT_COMPILED` have no effect here because their papers' tables were not read (a number not read
from its table is not written); their halves can read ``inconclusive`` but never ``underpowered``.
Compiled 2026-11-28 from the papers' tables, before any result of the standard-v3 record was seen; the papers' own
settings are far larger than the benchmark's, so these say what effect a claim is about, not what a small model
should show. The report sets each half's detectable effect beside its paper's: a record that cannot see it says
``underpowered`` (train/claims.py).
"""
from __future__ import annotations

PAPER_COPY = {"none vs alibi": 0.96, "none vs sinusoidal": 0.96, "none vs rope": 0.96, "relative vs alibi": 0.21,
              "relative vs sinusoidal": 0.21, "relative vs rope": 0.21}
PAPER_COPY_SOURCE = ("Kazemnejad et al. 2023 Fig. 3, copy, a 107M decoder trained on lengths up to 20: exact match at "
                     "40 (2x) NoPE 0.96, T5 0.21, ALiBi, rotary and sinusoidal 0.00 (read from the figure, +-0.01), "
                     "every kind exact at the training length; learned APE not tested")
PAPER_PRESS = {"alibi vs rope": 1.75, "alibi vs sinusoidal": 3.19}
PAPER_PRESS_SOURCE = ("Press et al. 2022 appendix Tables 2-4, WikiText-103, 247M, trained at 1,024 tokens: validation "
                      "perplexity 1,024 -> 16,024 ALiBi 18.66 -> 17.98, rotary 19.33 -> 106.99, sinusoidal 19.34 -> "
                      "453.32 (worsening in log ppl: -0.04, 1.71, 3.15); T5 33.35 at 12,024 (not flat), so no T5 half")
PAPER_HEO = {"rope-mixed vs rope": 0.030, "rope-mixed vs learned": 0.032, "rope vs learned": 0.002}
PAPER_HEO_SOURCE = ("Heo et al. 2024 (naver-ai/rope-vit README table and multi-resolution figure), DeiT-III ViT-S trained "
                    "at 224 px: top-1 224 -> 512 px RoPE-Mixed 80.9 -> 79.1, RoPE-Axial 80.9 -> 76.1, APE 80.4 -> 75.4 "
                    "(512 read from the figure, +-0.1)")
PAPER_HEO_CENTERED = {f"{a}@centered vs {b}" if b == "learned" else f"{a}@centered vs {b}@centered": v
                      for (a, b), v in {("rope-mixed", "rope"): 0.030, ("rope-mixed", "learned"): 0.032,
                                        ("rope", "learned"): 0.002, ("rope-mixed", "sinusoidal"): 0.032,
                                        ("rope", "sinusoidal"): 0.002}.items()}
PAPER_COMROPE = ({"comrope vs liere": 0.0042}, "Yu et al. 2025 Table 1, ImageNet, trained at 224 px: top-1 224 -> 512 "
                 "px ComRoPE-LD 65.49 -> 55.29, LieRE 64.36 -> 53.74")
PAPER_LIERE = ({"liere vs rope": 0.048}, "Ostmeier et al. 2024 Table 1, ViT-B from scratch on CIFAR-100 at its "
               "resolution: LieRE_8 70.3, the axial RoPE (VisionLlama) 65.5")
PAPER_VIDEO = {"videorope": ({"videorope vs rope": 0.124}, "Wei et al. 2025 Table 3, V-NIAH at 64k: VideoRoPE 91.11, "
                             "M-RoPE 78.67 (accuracy at the longest context)"),
               "vrope": ({"vrope vs rope": 0.142}, "Liu et al. 2025 Table 4, V-NIAH at 1,024-1,216 frames (trained on "
                         "16): VRoPE 87.03, RoPE-3D 72.81 (accuracy at the longest)")}

NOT_COMPILED = {  # claim source -> why no effect is given (the report says it beside the claim)
    source: "not compiled here (the paper's tables were not read when train/papers.py was compiled)"
    for source in ("Li et al. 2024", "Lin et al. 2025", "Gopalakrishnan et al. 2025", "Schenck et al. 2025",
                   "Liu et al. 2018")}
