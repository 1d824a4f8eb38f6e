"""The benchmark's protocol, in one place: open this file first.

For every task: what it tests and whose protocol it follows, the size it trains at and the sizes
it is tested at, its metric, its **competence bar** (what its best kinds must reach in distribution
before any comparison: a task whose best kinds miss it is "not learned at this budget" and gives no
verdict), its floors (``train/floors.py``: chance, majority, n-gram, mean predictor, and what a
model **blind to order** can reach on the same data), and the options the protocol gives some kinds
(each with its reason). Then the literature claims the report checks, each with its paper, the
kinds it compares, what it measures and how our protocol differs from the paper's (or why it is
``not tested``).

Rules of the report (``train/report.py``; statistics in ``train/stats.py``), fixed before any result
beyond the training size was looked at:

- A run is one training (model seed x data seed); every number is a mean over runs with a 95 % t
  interval. A kind *counts* on a task iff its mean passes the bar and it beats every floor of its
  runs' data by a one-sided 95 % t test; only kinds that count enter a claim.
- A kind *uses position* iff it also beats the order-blind floor and NoPE (``none``, Welch test).
- Beyond the training size: retention ``(m(xk) - f(xk)) / (m(x1) - f(x1))`` per run (``f`` the
  strongest floor), with its t interval; degradation ``m(xk) - m(x1)`` is paired per run.
- A claim is a set of ordered pairs (``a`` better than ``b``); each pair is a Welch t test, Holm-
  corrected within the claim. ``agrees``: every pair significant in the claimed direction;
  ``disagrees``: some pair significant against it; otherwise ``inconclusive``, with the smallest
  effect the design detects (80 % power). ``not tested``: the protocol differs from the paper's in a
  way that changes what is measured, said in the claim; or too few kinds count.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from .changes import CHANGES_AFTER_RESULTS  # noqa: F401 (the protocol's record of its changes)
from .papers import (PAPER_COMROPE, PAPER_COPY, PAPER_COPY_SOURCE, PAPER_HEO, PAPER_HEO_CENTERED, PAPER_HEO_SOURCE,
                     PAPER_LIERE, PAPER_PRESS, PAPER_PRESS_SOURCE, PAPER_VIDEO)

ONE_PIXEL = 2 / 63  # one pixel of a 64-pixel image in [-1, 1] coordinates



@dataclass(frozen=True)
class Bar:
    """A competence bar: the task's metric must reach ``value``, or beat the floor named ``floor``."""

    text: str
    value: float | None = None
    floor: str | None = None


@dataclass(frozen=True)
class KindOption:
    """Options the protocol gives one kind on one task: ``options(train_grid, max_grid) -> dict``, and why."""

    options: Callable[[tuple, tuple], dict]
    reason: str


def addition_digits(grid: tuple) -> int:
    """Digits per operand of a decoder-only addition sequence of ``grid = (3L + 2,)`` tokens (at least 1)."""
    return max((int(grid[0]) - 2) // 3, 1) if grid else 1


@dataclass(frozen=True)
class Task:
    """One line of the protocol: a dataset trained at one size and tested at larger ones."""

    name: str  # "<domain>/<task>"
    dataset: str  # train.data name
    model: str  # models name
    dims: int
    size_key: str  # the dataset option that grows
    train_size: float
    test_sizes: tuple  # values of size_key, the first equal to train_size
    metric: str  # key of train.engine.summarize
    higher_is_better: bool
    bar: Bar
    unit: str = ""
    data: dict = field(default_factory=dict)  # fixed dataset options (train and val; test too unless test_data says)
    model_opts: dict = field(default_factory=dict)  # model options; they win over the preset's dim / depth / heads
    conv: bool = False  # coordinate task: a conv net; kinds are "conv" / "conv+coord"
    test_data: dict = field(default_factory=dict)  # dataset options of the test splits only
    protocol: str = ""  # what the task tests and whose protocol it follows (printed in the report)
    order_blind: str = ""  # what a model blind to order reaches, and how the floor computes it
    archs: dict = field(default_factory=dict)  # coordinate tasks: kind ("conv", "conv+coord") -> ConvNet options
    kind_options: dict = field(default_factory=dict)  # kind -> KindOption (the protocol's choices, with reasons)
    train_scale_crop: tuple | None = None  # zoom tasks: training images through a random resized crop of this area
    # range (train/bench_data.py ScaleCrop), so the model has seen content at the test sizes' scales
    competence_split: str = "test"  # where the bar is judged at the training size: "val" when the test split is
    # held out by design (Liu et al.'s quadrant), so a model that fits its training data is not called incompetent

    @property
    def causal(self) -> bool:
        return bool(self.model_opts.get("causal"))


KAZEMNEJAD_PROTOCOL = ("decoder-only (causal) model trained on lengths 1..L, tested at exactly L, 1.5L, 2L (their "
                       "out-of-distribution range reaches 2L); exact match of the teacher-forced output (= greedy "
                       "decoding right): Kazemnejad et al. 2023")
PRESS_PROTOCOL = ("causal character LM trained on windows of C characters (every target scored); at every test "
                  "context the same target characters are scored (the last C/2 of each window), so a longer context "
                  "only adds history: Press et al. 2022's extrapolation with a sliding window. The data seeds shift "
                  "the windows by under C/2 characters: they vary the cut, not the text")
ZOOM = "the same scene rendered at a higher resolution (more patches, same content): Heo et al. 2024"
ZOOM_CROP = (0.25, 1.0)  # random resized crops of 1/4 to all of the image: content 1-2x larger, the test zoom's range
# (DeiT-III's and RoPE-ViT's training augmentation; without it NoPE itself collapses under zoom)
ZOOM_TRAINED = ("; trained with random resized crops of 1/4 to all of each image (content 1-2x larger, as DeiT-III; "
                "since 2026-11-28: the standard record's rows were trained without, train/changes.py)")
CANVAS = "a larger field with objects of the same pixel size (position extrapolation; not Heo et al.'s protocol)"
LIU = ("a one-hot pixel in a 64x64 image -> its (row, col); CoordConv vs plain conv, as Liu et al. 2018 (their "
       "supervised coordinate regression task and split), both with the paper's He-normal initialization")
COPY_BAR = Bar("exact-match sequence accuracy >= 0.95 at the training length", value=0.95)
IMAGE_BAR = Bar("accuracy >= 0.9 at the training resolution", value=0.9)
COORD_BAR = Bar("error below the mean predictor's (one-sided t test); the one-pixel bar is Liu et al.'s claim itself",
                floor="mean-predictor")
ORDER_BAR = Bar("above the order-blind ceiling (one-sided t test)", floor="order-blind")
ORDER_BLIND_TAGS = ("exact: each output slot guessed as the most common symbol not yet written (the bag of the "
                    "tokens before it, which is all a model blind to their order knows)")
ORDER_BLIND_POSITIONS = ("the majority class: the label depends only on positions (a ceiling for a model blind to the "
                         "order of patches; order inside one patch is still visible)")
ROPE_VIT = KindOption(lambda train, largest: {"theta": 100.0},
                      "RoPE-Axial at RoPE-ViT's theta 100 (Heo et al. 2024 code), not the language models' 10000")
FIRE_L = KindOption(lambda train, largest: {"init_L": max(train[0] // 2, 1)},
                    "init_L at half the training length, so FIRE's progressive interpolation acts (Li et al. 2024)")
T5_IN_CONTEXT = KindOption(lambda train, largest: {"max_distance": int(train[0]),
                                                    "num_buckets": min(32, 2 * (int(train[0]) // 2))},
                           "T5 buckets with max_distance at the training context, so every bucket is trained (the "
                           "default 128 at a context of 64 leaves the last buckets, which hold most offsets at 2-8x, "
                           "untrained); T5's 32 buckets (fewer only for a context under 32); Press et al. 2022 "
                           "compare T5's bias as trained")
COPE_MAX = KindOption(lambda train, largest: {"max_pos": int(largest[0])},
                      "max_pos covers every offset of the largest test sequence (Golovneva et al. 2024)")
ABACUS_K = KindOption(lambda train, largest: {"max_k": addition_digits(largest)},
                      "max_k at the largest test length in digits, so training offsets cover every place tested (McLeish "
                      "et al. 2024: max_k 100 for tests up to 100 digits)")
COUPLING_MAX = KindOption(lambda train, largest: {"max_position": 2 * addition_digits(largest) + 2},
                          "max_position at twice the largest test length in digits plus 2, as Cho et al. 2024's addition "
                          "runs (202 for tests up to 100 digits; their smallest, 17 for 15, is the length plus 2), so "
                          "random starts train the rows longer numbers use")
CAUSAL_TEXT = {"data": {"causal": True, "min_length": 1}, "test_data": {"min_length": None},
               "model_opts": {"causal": True}, "protocol": KAZEMNEJAD_PROTOCOL, "bar": COPY_BAR,
               "order_blind": ORDER_BLIND_TAGS, "kind_options": {"fire": FIRE_L, "cope": COPE_MAX}}
VIT = {"patch_size": 4, "pool": "mean"}
PAPER_COORDCONV = {"arch": "coordconv_regressor", "value_gain": 0.0}  # the paper's He-normal init, as the conv net's

TASKS = {t.name: t for t in [
    Task("image/shapes", "shapes", "vit", 2, "image_size", 32, (32, 48, 64), "acc", True, IMAGE_BAR, "px",
         model_opts=VIT, protocol=CANVAS, order_blind=ORDER_BLIND_POSITIONS, kind_options={"rope": ROPE_VIT}),
    Task("image/shapes-zoom", "shapes", "vit", 2, "image_size", 32, (32, 48, 64), "acc", True, IMAGE_BAR, "px",
         data={"growth": "zoom"}, model_opts=VIT, protocol=ZOOM + ZOOM_TRAINED, order_blind=ORDER_BLIND_POSITIONS,
         kind_options={"rope": ROPE_VIT}, train_scale_crop=ZOOM_CROP),
    Task("image/digits-zoom", "digits", "vit", 2, "image_size", 32, (32, 48, 64), "acc", True, IMAGE_BAR, "px",
         data={"growth": "zoom", "channels": 1}, model_opts={**VIT, "in_chans": 1}, protocol=ZOOM + ZOOM_TRAINED,
         order_blind="measured: NoPE (a bag of patches)", kind_options={"rope": ROPE_VIT},
         train_scale_crop=ZOOM_CROP),
    Task("image/digits-canvas", "digits", "vit", 2, "image_size", 32, (32, 48, 64), "acc", True, IMAGE_BAR, "px",
         data={"growth": "canvas", "digit_size": 24, "channels": 1}, model_opts={**VIT, "in_chans": 1},
         protocol=CANVAS, order_blind="measured: NoPE (a bag of patches)", kind_options={"rope": ROPE_VIT}),
    Task("image/mnist-zoom", "mnist", "vit", 2, "image_size", 28, (28, 42, 56), "acc", True,
         Bar("accuracy >= 0.95 at 28 px", value=0.95), "px", model_opts={"patch_size": 7, "pool": "mean", "in_chans": 1},
         protocol=ZOOM + " (MNIST)", order_blind="measured: NoPE (a bag of patches)", kind_options={"rope": ROPE_VIT}),
    Task("image/mnist-pair", "mnist_pair", "vit", 2, "width", 70, (70, 105, 140), "acc", True,
         Bar("accuracy >= 0.9 at width 70", value=0.9), "px", data={"target": "left"},
         model_opts={"patch_size": 7, "pool": "mean", "in_chans": 1},
         protocol=CANVAS + " (MNIST: two digits side by side, the label is the left one)",
         order_blind="0.5: a model that knows both digits but not which is left guesses between them",
         kind_options={"rope": ROPE_VIT}),
    Task("image/cifar10", "cifar10", "vit", 2, "image_size", 32, (32, 48, 64), "acc", True,
         Bar("accuracy >= 0.6 at 32 px", value=0.6), "px", model_opts=VIT,
         protocol=ZOOM + " (bilinear upsampling of the 32 px images)", order_blind="measured: NoPE (a bag of patches)",
         kind_options={"rope": ROPE_VIT}),
    Task("audio/tones", "tones", "audio", 2, "duration", 1.0, (1.0, 1.5, 2.0), "acc", True, ORDER_BAR, "s",
         data={"syllables": 2}, model_opts={"patch_size": [8, 8], "pool": "mean"},
         protocol="the same two syllables spread over a longer clip (each in its half of the clip; the background "
                  "noise fills the clip at every duration, so a longer clip holds more noise, not padding)",
         order_blind="the ceiling of a model blind to patch order: the unordered pair of contours identified, the "
                     "order guessed by its most common training label (6/9 with balanced classes)"),
    Task("audio/spoken", "spoken_words", "audio", 2, "duration", 1.0, (1.0, 1.5, 2.0), "acc", True,
         Bar("accuracy >= 0.8 at 1 s", value=0.8), "s", model_opts={"patch_size": [8, 8], "pool": "mean"},
         protocol="a synthesized keyword (held-out voices) at a random offset in a longer clip (more time patches)",
         order_blind="measured: NoPE (a bag of spectrogram patches)"),
    Task("audio/speech_commands", "speech_commands", "audio", 2, "duration", 1.0, (1.0, 1.5, 2.0), "acc", True,
         Bar("accuracy >= 0.8 at 1 s", value=0.8), "s", model_opts={"patch_size": [8, 8], "pool": "mean"},
         protocol="the keyword at a random offset in a longer clip filled with the dataset's own _background_noise_ "
                  "recordings at volume U(0, 0.1), the training range (val and the 1 s test too): a longer clip holds "
                  "more audio around the same keyword, not digital silence",
         order_blind="measured: NoPE (a bag of spectrogram patches)"),
    Task("text/copy", "copy", "text", 1, "length", 8, (8, 12, 16), "seq_acc", True, unit="L", **CAUSAL_TEXT),
    Task("text/reverse", "reverse", "text", 1, "length", 8, (8, 12, 16), "seq_acc", True, unit="L", **CAUSAL_TEXT),
    Task("text/addition", "addition", "text", 1, "length", 8, (8, 12, 16), "seq_acc", True, unit="L",
         **{**CAUSAL_TEXT, "order_blind": "not computed (no closed form for addition)"}),
    Task("text/addition-place", "addition", "text", 1, "length", 8, (8, 12, 16), "seq_acc", True, unit="L",
         **{**CAUSAL_TEXT, "data": {**CAUSAL_TEXT["data"], "place": True},
            "protocol": KAZEMNEJAD_PROTOCOL + "; every token's position is its place id (the digit of 10**i: i + 1, "
                        "other tokens 0), as Abacus and position coupling assign them (McLeish et al. 2024, Cho et al. "
                        "2024 train on up to L digits and test beyond)",
            "order_blind": "not computed (no closed form for addition)",
            "kind_options": {**CAUSAL_TEXT["kind_options"], "abacus": ABACUS_K, "coupling": COUPLING_MAX}}),
    Task("text/stdlib_lm", "stdlib_lm", "text", 1, "context", 64, (64, 128, 256, 512), "ppl", False,
         Bar("perplexity below the trigram's on the same test characters", floor="trigram"), "C",
         test_data={"score_last": 32, "align": 512}, model_opts={"causal": True}, protocol=PRESS_PROTOCOL,
         order_blind="measured: a softmax regression on the bag of the window's characters (train/floors.py)",
         kind_options={"fire": FIRE_L, "relative": T5_IN_CONTEXT}),
    Task("text/stdlib_lm-256", "stdlib_lm", "text", 1, "context", 256, (256, 512, 1024, 2048), "ppl", False,
         Bar("perplexity below the trigram's on the same test characters", floor="trigram"), "C",
         test_data={"score_last": 128, "align": 2048}, model_opts={"causal": True},
         protocol=PRESS_PROTOCOL + "; the scale-matched check of FIRE and PoPE: a 256-character context (tested to 8x) "
                  "and head_dim 32, where FIRE's log normalizer and PoPE's frequencies act as in their papers",
         order_blind="measured: a softmax regression on the bag of the window's characters (train/floors.py)",
         kind_options={"fire": FIRE_L}),
    Task("video/trajectory", "trajectory", "video", 3, "frames", 8, (8, 12, 16), "acc", True, ORDER_BAR, "frames",
         data={"motions": "linear", "disk_radius": 2.2, "zero_background": True},
         model_opts={"tubelet": [1, 8, 8], "pool": "mean", "heads": 2},
         protocol="the same motion at a higher frame rate (more frames); one-frame tubelets, so only positions "
                  "tell the frame order (right/left, down/up)",
         order_blind="the ceiling of a model blind to frame order: the axis of motion identified, the direction "
                     "guessed (1/2)"),
    Task("video/trajectory-long", "trajectory", "video", 3, "frames", 8, (8, 12, 16), "acc", True, ORDER_BAR, "frames",
         data={"motions": "linear", "disk_radius": 2.2, "zero_background": True, "growth": "duration",
               "max_frames": 16, "frame_size": 32},
         model_opts={"tubelet": [1, 8, 8], "pool": "mean", "heads": 2},
         protocol="the motion continued at the training frame rate (more frames, a longer clip: VideoRoPE's and "
                  "VRoPE's setting); one-frame tubelets, so only positions tell the frame order",
         order_blind="the ceiling of a model blind to frame order: the axis of motion identified, the direction "
                     "guessed (1/2)"),
    Task("coord/uniform", "onehot_pixel", "conv", 2, "split_mode", 1, (1,), "coord_err", False,
         COORD_BAR,
         data={"split_mode": "uniform", "margin": 4}, conv=True, protocol=LIU, order_blind="not applicable (a conv net)",
         archs={"conv": {"arch": "conv_uniform"}, "conv+coord": PAPER_COORDCONV}),
    Task("coord/quadrant", "onehot_pixel", "conv", 2, "split_mode", 1, (1,), "coord_err", False,
         COORD_BAR,
         data={"split_mode": "quadrant", "margin": 4}, conv=True, protocol=LIU, order_blind="not applicable (a conv net)",
         competence_split="val",
         archs={"conv": {"arch": "conv_quadrant"}, "conv+coord": PAPER_COORDCONV}),
]}


# --- literature claims --------------------------------------------------------------------------

@dataclass
class Claim:
    """A trend a paper reports on ``task``, as ordered pairs: every kind of a tier beats every kind of later tiers.

    ``measure``: "largest" (the metric at the largest test size), "degradation" (its worsening from
    the training size to the largest, paired per run) or "training" (the metric at the training size:
    a claim about in-distribution quality). ``threshold``: every kind of ``meets`` is on the good side
    of it and every kind of ``misses`` is not. ``keeps``: kinds said to keep their quality beyond the
    training size (their retention at the largest size must stay above 0, train/claims.py). ``note``:
    how the protocol differs without changing what is measured; ``not_tested``: a difference that
    does, so no verdict is given.
    """

    source: str
    text: str
    task: str
    tiers: list[list[str]] = field(default_factory=list)
    measure: str = "largest"
    threshold: float | None = None
    meets: list[str] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)
    keeps: list[str] = field(default_factory=list)  # kinds said to keep their quality beyond the training size
    keeps_untested: str = ""  # why the keeps halves are not tested on this task (dropped, named in the verdict)
    note: str = ""
    not_tested: str = ""
    paper_effect: dict[str, float] = field(default_factory=dict)  # "a vs b" (or "*": every half) -> the effect the
    # paper reports for that half, in this claim's measure and metric units (absent: not stated)
    paper_source: str = ""  # where: the paper's table or figure and the numbers it compares


KAZEMNEJAD = ("Kazemnejad et al. 2023", "decoder-only causal models trained on lengths up to L, tested up to 2L: NoPE "
              "(`none`) and T5's relative bias length-generalize better than absolute (`learned`, `sinusoidal`) and "
              "rotary encodings; ALiBi in between")
HEO = ("Heo et al. 2024", "RoPE-Mixed > RoPE-Axial (`rope-mixed`, `rope` at theta 100) > absolute (`learned`, its "
       "table interpolated, the paper's APE baseline) at the larger resolution, rotary kinds in index coordinates (their "
       "code's: new patches get new indices, extrapolated)")
HEO_CENTERED = ("Heo et al. 2024, centred coordinates", "RoPE-Mixed > RoPE-Axial > absolute at the larger resolution, "
                "with every kind's coordinates interpolated (`@centered`: the image spans the same range at every "
                "size; `learned`: its table resized): the same claim in the other convention")
VIDEO_NOTE = ("the paper measures long-video understanding and retrieval in a video LLM; here a small video classifier "
              "on clips 1.5x and 2x longer at the training frame rate")
LIU_SOURCE = "Liu et al. 2018"
ZOOM_TASKS = ("image/shapes-zoom", "image/digits-zoom", "image/mnist-zoom")
MNIST_ZOOM = ("image/mnist-zoom cannot test it: its NoPE (a bag of 7-px patches) reaches 0.895 at 28 px, so position "
              "adds at most ~6 points, and its 0.95 bar rested on one probe run; standard-v3 leaves the task (its "
              "rows stay in the standard record)")
CANVAS_NOTE = "on a canvas (positions extrapolated), not the paper's zoom: reported beside the zoom verdict"
LM_CHECK = "text/stdlib_lm-256"
FIRE_SCALE = ("at a 64-character context FIRE's log normalizer compresses offsets about 1.99x from 64 to 512 "
              "characters, against about 1.26x in the paper's 2k -> 8k")
POPE_SCALE = "with head_dim 16, 5 of PoPE's 16 frequencies complete a cycle within 64 positions"
CLAIMS = [
    *[Claim(*KAZEMNEJAD, task, [["none", "relative"], ["alibi"], ["learned", "sinusoidal", "rope"]],
            measure="degradation", note="a 2-layer model of width 48; their models are larger and trained longer",
            paper_effect=PAPER_COPY if task == "text/copy" else {},
            paper_source=PAPER_COPY_SOURCE if task == "text/copy" else "")
      for task in ("text/copy", "text/reverse", "text/addition")],
    Claim("Press et al. 2022", "on a causal LM, ALiBi and T5-style bias (`relative`) keep their perplexity at contexts "
          "longer than trained, where sinusoidal and RoPE degrade", "text/stdlib_lm",
          [["alibi", "relative"], ["sinusoidal", "rope"]], measure="degradation", keeps=["alibi", "relative"],
          paper_effect=PAPER_PRESS, paper_source=PAPER_PRESS_SOURCE,
          note="a character LM on Python sources, up to 8x the training context (the paper: word-level WikiText-103 up "
          "to 16x). On these sources no kind gains from history beyond the training context, so this measures "
          "robustness to unseen offsets, not the use of a longer context (the paper's headline)"),
    Claim("Sun et al. 2023", "on a causal LM, xPos (`xpos`) keeps perplexity at longer contexts better than RoPE",
          "text/stdlib_lm", [["xpos"], ["rope"]], measure="degradation",
          not_tested="the paper extrapolates with blockwise causal attention; the benchmark uses full attention"),
    *[Claim("Li et al. 2024", "on a causal LM, FIRE (`fire`) keeps its perplexity at longer contexts, better than RoPE "
            "and NoPE", task, [["fire"], ["rope", "none"]], measure="degradation",
            keeps=["fire"], keeps_untested="" if task == LM_CHECK else "not at this scale: judged on " + LM_CHECK,
            note="FIRE with init_L at half the training context, so its progressive interpolation acts" + (
                "" if task == LM_CHECK else "; its keeps half is not tested at this scale (" + FIRE_SCALE + "): judged "
                "on " + LM_CHECK)) for task in ("text/stdlib_lm", LM_CHECK)],
    Claim("Lin et al. 2025", "on a causal LM, the Forgetting Transformer's data-dependent ALiBi (`dd-alibi`, no other "
          "encoding) keeps its perplexity at longer contexts, better than RoPE", "text/stdlib_lm",
          [["dd-alibi"], ["rope"]], measure="degradation", keeps=["dd-alibi"],
          note="one forget-gate projection shared by the 3 blocks (an ndpe encoding is computed once per model; the "
          "paper has one per layer) and the plain LLaMA-style block, not FoX's Pro block"),
    *[Claim("Gopalakrishnan et al. 2025", "on a causal LM, PoPE (`pope`) keeps its perplexity at longer contexts, "
            "better than RoPE", task, [["pope"], ["rope"]], measure="degradation",
            keeps=["pope"], keeps_untested="" if task == LM_CHECK else "not at this scale: judged on " + LM_CHECK,
            note="a character LM on Python sources up to 8x the training context; the paper's models are far larger" + (
                "" if task == LM_CHECK else "; its keeps half is not tested at this scale (" + POPE_SCALE + "): judged "
                "on " + LM_CHECK)) for task in ("text/stdlib_lm", LM_CHECK)],
    *[Claim(source, f"on longer videos, {name} (`{kind}`) keeps its accuracy better than 3D RoPE",
            "video/trajectory-long", [[kind], ["rope"]], measure="degradation", keeps=[kind], note=VIDEO_NOTE,
            paper_effect=PAPER_VIDEO[kind][0], paper_source=PAPER_VIDEO[kind][1])
      for source, name, kind in (("Wei et al. 2025", "VideoRoPE", "videorope"), ("Liu et al. 2025", "VRoPE", "vrope"))],
    *[Claim("Yu et al. 2025", "at a larger resolution than trained, ComRoPE (`comrope`, LD) beats LieRE (`liere`) in a "
            "ViT", task, [["comrope"], ["liere"]], measure="degradation", paper_effect=PAPER_COMROPE[0],
            paper_source=PAPER_COMROPE[1],
            note=("the paper trains ViT-B/16 on ImageNet-1K at 224 px and tests the same images at larger resolutions, "
                  "positions normalized to the image, as here (a 2-block ViT, centered coordinates); its LieRE "
                  "baseline shares ComRoPE's block size, here LieRE is dense (its own paper's) and ComRoPE-LD takes "
                  "blocks of 6 (head_dim 12)") + ("" if task in ZOOM_TASKS else "; " + CANVAS_NOTE))
      for task in (*ZOOM_TASKS, "image/mnist-pair")],
    *[Claim(source, f"learned rotations (`{kind}`) beat RoPE-Axial (`rope`) in a ViT at its training resolution", task,
            [[kind], ["rope"]], measure="training", paper_effect=PAPER_LIERE[0] if kind == "liere" else {},
            paper_source=PAPER_LIERE[1] if kind == "liere" else "",
            note="the paper compares ViTs trained at scale (CIFAR-100, ImageNet; 3D data) at their training "
                 "resolution; here a 2-block ViT on small images, compared at the training size")
      for source, kind in (("Ostmeier et al. 2024", "liere"), ("Schenck et al. 2025", "string"))
      for task in (*ZOOM_TASKS, "image/mnist-pair")],
    Claim("Golovneva et al. 2024", "beyond the training length, CoPE (`cope`) beats absolute encodings and RoPE",
          "text/copy", [["cope"], ["learned", "sinusoidal", "rope"]],
          not_tested="plain copy is not one of the paper's tasks (selective copy, counting, flip-flop), which the "
                     "benchmark does not have yet"),
    *[Claim(*heo, task, tiers, measure="degradation", note="" if task in ZOOM_TASKS else CANVAS_NOTE,
            paper_effect=effect, paper_source=PAPER_HEO_SOURCE)
      for heo, tiers, effect in ((HEO, [["rope-mixed"], ["rope"], ["learned"]], PAPER_HEO),
                                 (HEO_CENTERED, [["rope-mixed@centered"], ["rope@centered"],
                                                 ["learned", "sinusoidal@centered"]], PAPER_HEO_CENTERED))
      for task in (*ZOOM_TASKS, "image/shapes", "image/digits-canvas", "image/mnist-pair")],
    Claim(LIU_SOURCE, "CoordConv is near-perfect (error under one pixel, 2/63) on the uniform split", "coord/uniform",
          threshold=ONE_PIXEL, meets=["conv+coord"]),
    Claim(LIU_SOURCE, "CoordConv is near-perfect (error under one pixel, 2/63) on the held-out quadrant, where plain "
          "conv fails", "coord/quadrant", threshold=ONE_PIXEL, meets=["conv+coord"],
          misses=["conv"]),
]
CLAIMS = [dataclasses.replace(c, not_tested=MNIST_ZOOM) if c.task == "image/mnist-zoom" and not c.not_tested else c
          for c in CLAIMS]
