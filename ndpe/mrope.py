"""M-RoPE position ids of an interleaved text / image / video sequence, in the layout of the Qwen vision-language
models (Qwen2-VL, Qwen2.5-VL with absolute time, Qwen3-VL), for ``rope`` with ``mrope_section=``.

A text run of ``n`` tokens continues one counter on all three axes (``t = h = w``). An image or video of ``(T, H, W)``
patches, merged ``spatial_merge x spatial_merge`` before the language model, takes ``T x H/m x W/m`` tokens in
row-major (t, h, w) order: ``h`` and ``w`` count from the counter, ``t`` counts from it in steps of 1 (images,
Qwen2-VL videos, Qwen3-VL's one-frame grids) or, for a video given with its seconds per temporal grid ``s``,
in steps of ``tokens_per_second * s`` floored (Qwen2.5-VL's absolute time: the same clip at another frame rate keeps
its time ids).

Where the counter resumes after an image or video (``resume=``):
    ``"offset"`` (default): it moves on by ``max(H, W) / m`` from where the segment started. This is transformers
        5.23's ``Qwen2_5_VLModel.get_rope_index`` (``second_per_grid_ts``, ``vision_config.tokens_per_second``),
        rewritten without a model so a model built on ndpe gets the same ids (``tests/test_mrope_positions.py``).
        A video longer than it is wide gets time ids past that point, so the text after it shares time ids with
        the video: ``[2, (8, 4, 4), 2]`` with ``spatial_merge=2`` puts the video's time ids at 2..9 and the text's at
        4, 5.
    ``"max"``: the largest id given so far, plus 1 (the original Qwen2-VL / Qwen2.5-VL code, transformers 4.x:
        ``st_idx = llm_pos_ids_list[-1].max() + 1``): the text after that video starts at 10, past every id of it.
        With absolute time ids (a video given its seconds) the time axis can set the largest id.
    The two agree wherever no id of a segment passes ``start + max(H, W) / m - 1`` (every image, and every video
    with no more time steps than ``max(H, W) / m``).

>>> import ndpe
>>> ids = ndpe.mrope_positions([2, (1, 4, 4), 1], spatial_merge=2)   # 2 text tokens, a 2 x 2 image, 1 text token
>>> ids.T.tolist()
[[0, 1, 2, 2, 2, 2, 4], [0, 1, 2, 2, 3, 3, 4], [0, 1, 2, 3, 2, 3, 4]]
"""
from __future__ import annotations

from typing import Any, Sequence, Union, cast

import torch
from einops import rearrange
from torch import Tensor

from .checks import check_choice, check_number, is_int
from .memory import check_memory

Segment = Union[int, Sequence[float]]
MAX_ID = torch.iinfo(torch.int64).max
ID_BYTES = 48  # per token at the peak: its (3,) int64 ids, once in its part and once in the joined output
RESUMES = ("offset", "max")  # where the counter resumes after a vision segment


def mrope_positions(segments: Sequence[Segment], *, spatial_merge: int = 1, tokens_per_second: float | None = None,
                    start: int = 0, resume: str = "offset", device: torch.device | str | None = None) -> Tensor:
    """``(N, 3)`` int64 (t, h, w) ids for ``segments`` in order (see the module doc).

    Args:
        segments: each an int (a text run of that many tokens), a ``(T, H, W)`` patch grid (an image or a video whose
            time ids step by 1), or ``(T, H, W, seconds_per_grid)`` (a video with absolute time ids; needs
            ``tokens_per_second``).
        spatial_merge: the vision tower's ``spatial_merge_size`` (H and W must divide by it).
        tokens_per_second: Qwen2.5-VL's ``vision_config.tokens_per_second``.
        start: the counter's first value (ids of a continuation).
        resume: where the counter resumes after an image or video: ``"offset"`` (its start + ``max(H, W) / m``,
            transformers 5.x) or ``"max"`` (its largest id + 1, the original Qwen2-VL / Qwen2.5-VL rule).

    Feed them to ``pe(positions=ids)``, or as HF's ``(3, B, T)`` with ``ids.T[:, None]``.
    """
    if isinstance(segments, (str, bytes)) or not isinstance(segments, Sequence) or not segments:
        raise TypeError(f"segments must be a non-empty list of ints (text runs) and (T, H, W[, seconds]) grids, "
                        f"got {segments!r}")
    if not is_int(spatial_merge) or spatial_merge < 1:
        raise ValueError(f"spatial_merge must be a positive int, got {spatial_merge!r}")
    if not is_int(start) or start < 0:
        raise ValueError(f"start must be an int >= 0, got {start!r}")
    check_choice(resume, "resume", RESUMES)
    if tokens_per_second is not None:
        check_number(tokens_per_second, "tokens_per_second", low=0.0, inclusive=False)
    plan: list[tuple[Any, int, tuple[int, int, int, float] | None]] = []  # (segment, first id, t, h, w, time step)
    pos = start  # everything is checked before anything is built
    for seg in segments:
        if isinstance(seg, int) and not isinstance(seg, bool):
            if seg < 0:
                raise ValueError(f"a text run must be an int >= 0 tokens, got {seg}")
            plan.append((seg, pos, None))
            pos += seg
            continue
        t, h, w, interval = _grid(seg, spatial_merge, tokens_per_second)
        ends = torch.tensor([0, t - 1]) * interval  # the first and last time steps, in the arithmetic built below
        if not (ends.isfinite().all() and float(ends[1]) < 2.0 ** 63 and int(ends[1]) + pos <= MAX_ID):
            video = tuple(cast(Sequence, seg))
            raise ValueError(f"the time ids of video {video} reach {pos} + {float(ends[1]):.3g} ((T - 1) x "
                             f"tokens_per_second x seconds_per_grid = {t - 1} x {interval:.3g}), past int64's {MAX_ID}: "
                             "pass a tokens_per_second and seconds the model was trained with")
        plan.append((seg, pos, (t, h, w, interval)))
        pos += max(h, w) if resume == "offset" else max(int(ends[1]), h - 1, w - 1) + 1  # "max": largest id + 1
    if pos - 1 > MAX_ID:
        raise ValueError(f"the ids of these segments run from start={start} to {pos - 1}, past int64's {MAX_ID}: "
                         "use a smaller start or fewer tokens")
    n = sum(seg if grid is None else grid[0] * grid[1] * grid[2] for seg, _, grid in plan)
    check_memory(ID_BYTES * n, lambda: f"M-RoPE ids of {n} tokens ((N, 3) int64 and the parts they are joined from)",
                 "use fewer tokens")
    parts = []
    for seg, first, grid in plan:
        if grid is None:
            parts.append(rearrange(torch.arange(first, first + seg, device=device), "n -> n 1").expand(seg, 3))
            continue
        t, h, w, interval = grid
        time = (torch.arange(t, device=device) * interval).long() + first  # floored after the multiply, as HF
        mesh = torch.meshgrid(time, torch.arange(h, device=device) + first, torch.arange(w, device=device) + first,
                              indexing="ij")
        parts.append(rearrange(torch.stack(mesh), "d t h w -> (t h w) d"))
    return torch.cat(parts)


def _grid(seg, merge: int, tokens_per_second: float | None) -> tuple[int, int, int, float]:
    """``(T, H / merge, W / merge, time step)`` of one vision segment, checked."""
    if not isinstance(seg, (tuple, list)) or len(seg) not in (3, 4) or not all(is_int(n) and n >= 1 for n in seg[:3]):
        raise ValueError(f"a vision segment must be (T, H, W) or (T, H, W, seconds_per_grid) with positive int T, H, W, "
                         f"got {seg!r}")
    t, h, w = seg[:3]
    if h % merge or w % merge:
        raise ValueError(f"grid {tuple(seg[:3])} does not divide by spatial_merge={merge} on H and W")
    if len(seg) == 3:
        return t, h // merge, w // merge, 1.0
    if tokens_per_second is None:
        raise ValueError(f"a video with seconds_per_grid ({seg!r}) needs tokens_per_second= (Qwen2.5-VL's "
                         "vision_config.tokens_per_second)")
    seconds = check_number(seg[3], "seconds_per_grid", low=0.0)
    return t, h // merge, w // merge, tokens_per_second * seconds
