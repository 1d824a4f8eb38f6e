"""Video dataset "trajectory": one moving disk whose path over the clip is the class.

Classes (``classes``), paths over clip time ``t`` in [0, 1] (row axis points down)::

    0 right   1 left   2 down   3 up          straight line, 40-60% of the frame
    4 clockwise   5 counter-clockwise         3/4 of a circle, radius 20-30% of the frame
    6 bounce-horizontal   7 bounce-vertical   out and back along one axis (either sign)

The path is fixed in clip time and sampled at ``t_k = k / (frames - 1)``, so 12 or 16 frames
(for extrapolation) show the same motion at a higher frame rate (``growth="rate"``, the default). With
``growth="duration"`` the frame rate is fixed instead: item ``i`` is one motion of ``max_frames`` frames at
the rate of ``base_frames`` frames over ``[0, 1]``, and a clip of ``frames`` frames is a window of it at an
offset drawn per item (uniform over ``0 .. max_frames - frames``): more frames show more of the same motion at
the same rate, and the longest clip shows all of it (linear motions only). The window is random so that where
the disk is does not tell the direction: a first-half window would sit on the start side of the frame, a cue
that a model blind to frame order could read. Start point, extent, colour
(bright RGB) and a little pixel noise are random. Right/left, down/up and cw/ccw are time
reversals of each other and cover the same pixels: the order of frames is the label.
``motions="linear"`` keeps classes 0-3 only: a model blind to frame order can tell the axis but
not the direction (at most 1/2 right).
Items ``(float (3, T, H, W), int)``, pixels normalised with mean = std = 0.5 (black is -1), or
with ``zero_background=True`` scaled to [0, 2] (black is 0, same contrast): a token of empty
background is then the embedding's bias alone, so the few tokens the disk covers stand out.
"""
from __future__ import annotations

import numpy as np
from einops import rearrange

import torch

from ._base import SyntheticDataset, check_choice, check_min, to_unit_range

CLASSES = ("right", "left", "down", "up", "clockwise", "counter-clockwise", "bounce-horizontal", "bounce-vertical")
LINEAR = {0: (0, 1), 1: (0, -1), 2: (1, 0), 3: (-1, 0)}  # class -> unit (d_row, d_col)
DISK_RADIUS = 1.5  # pixels, at every frame size (default of the ``disk_radius`` option)
MOTIONS = {"all": CLASSES, "linear": CLASSES[:4]}
GROWTHS = ("rate", "duration")  # more frames: the same clip at a higher frame rate, or a longer clip at the same rate
REVERSAL_GROUP = {"right": 0, "left": 0, "down": 1, "up": 1, "clockwise": 2, "counter-clockwise": 2,
                  "bounce-horizontal": 3, "bounce-vertical": 4}  # a bounce reversed is itself


def path(label: int, t: np.ndarray, frame_size: int, rng, radius: float = DISK_RADIUS, span: float = 1.0) -> np.ndarray:
    """Disk centres ``(T, 2)`` (row, col) in pixel units for class ``label`` at clip times ``t``; a linear motion
    covers 40-60 % of the frame over clip times ``[0, span]`` (``span`` > 1: a clip longer than ``[0, 1]``)."""
    margin = radius + 1.0
    if label in LINEAR:
        step = np.array(LINEAR[label]) * rng.uniform(0.4, 0.6) * frame_size / span
        start = rng.uniform(margin + np.maximum(-step * span, 0), frame_size - margin - np.maximum(step * span, 0))
        return start + t[:, None] * step
    if label in (4, 5):
        radius = rng.uniform(0.2, 0.3) * frame_size
        centre = rng.uniform(margin + radius, frame_size - margin - radius, 2)
        angle = rng.uniform(0, 2 * np.pi) + (1 if label == 4 else -1) * 1.5 * np.pi * t  # + angle = clockwise on screen
        return centre + radius * np.stack([np.sin(angle), np.cos(angle)], -1)
    axis = 1 if label == 6 else 0
    step = np.zeros(2)
    step[axis] = rng.choice([-1, 1]) * rng.uniform(0.4, 0.6) * frame_size
    start = rng.uniform(margin + np.maximum(-step, 0), frame_size - margin - np.maximum(step, 0))
    return start + (1 - np.abs(2 * t - 1))[:, None] * step


def render(centres: np.ndarray, frame_size: int, colour, radius: float = DISK_RADIUS) -> np.ndarray:
    """Anti-aliased disks, ``(3, T, S, S)`` in [0, 1], one per frame at ``centres (T, 2)``."""
    grid = np.arange(frame_size) + 0.5
    dr = grid[None, :, None] - centres[:, 0, None, None]  # (T, S, 1)
    dc = grid[None, None, :] - centres[:, 1, None, None]  # (T, 1, S)
    cover = np.clip(radius + 0.5 - np.sqrt(dr**2 + dc**2), 0, 1)  # (T, S, S)
    return rearrange(cover, "t h w -> 1 t h w") * np.asarray(colour).reshape(3, 1, 1, 1)


class Trajectory(SyntheticDataset):
    """8 trajectory classes; ``frames`` frames of ``frame_size`` x ``frame_size``.

    >>> video, label = Trajectory("train", frames=12)[0]
    >>> video.shape, Trajectory.classes[label] in Trajectory.classes
    (torch.Size([3, 12, 16, 16]), True)
    """

    name, domain, task = "trajectory", "video", "classify"
    num_classes, classes = len(CLASSES), CLASSES

    def __init__(self, split: str, *, seed: int = 0, frames: int = 8, frame_size: int = 16, size: int | None = None,
                 motions: str = "all", disk_radius: float = DISK_RADIUS, zero_background: bool = False,
                 growth: str = "rate", base_frames: int = 8, max_frames: int = 16):
        super().__init__(split, seed=seed, size=size)
        check_min("frames", frames, 3)
        check_choice("growth", growth, GROWTHS)
        if growth == "duration":
            check_min("base_frames", base_frames, 3)
            if motions != "linear":
                raise ValueError(f"growth='duration' continues linear motions only: pass motions='linear', got {motions!r}")
            if not base_frames <= frames <= max_frames:
                raise ValueError(f"growth='duration' needs base_frames <= frames <= max_frames, got {base_frames}, "
                                 f"{frames}, {max_frames}")
        self.growth, self.base_frames, self.max_frames = growth, int(base_frames), int(max_frames)
        check_min("frame_size", frame_size, 12)
        check_choice("motions", motions, tuple(MOTIONS))
        if not 0.5 <= disk_radius <= frame_size / 7:
            raise ValueError(f"disk_radius must be in [0.5, frame_size / 7 = {frame_size / 7:g}] so every path fits, "
                             f"got {disk_radius}")
        if not isinstance(zero_background, bool):
            raise TypeError(f"zero_background must be a bool, got {zero_background!r}")
        self.frames, self.frame_size = int(frames), int(frame_size)
        self.classes, self.num_classes = MOTIONS[motions], len(MOTIONS[motions])
        # labels that differ only by the order of frames (time reversals) share a group: right/left, down/up, cw/ccw
        self.order_blind_groups = [REVERSAL_GROUP[c] for c in self.classes]
        self.disk_radius, self.zero_background = float(disk_radius), zero_background

    def make(self, rng):
        label = int(rng.integers(self.num_classes))
        if self.growth == "duration":  # the frame rate of base_frames over [0, 1]; a window of the longest clip
            span = (self.max_frames - 1) / (self.base_frames - 1)
            centres = path(label, np.arange(self.max_frames) / (self.base_frames - 1), self.frame_size, rng,
                           self.disk_radius, span)
            offset = int(rng.integers(self.max_frames - self.frames + 1))  # drawn at every size: same colour after
            centres = centres[offset:offset + self.frames]
        else:
            centres = path(label, np.linspace(0, 1, self.frames), self.frame_size, rng, self.disk_radius)
        colour = rng.uniform(0.5, 1.0, 3)
        noise = rng.uniform(0, 0.05) * rng.standard_normal((3, self.frames, self.frame_size, self.frame_size))
        video = np.clip(render(centres, self.frame_size, colour, self.disk_radius) + noise, 0, 1)
        if self.zero_background:
            return torch.from_numpy((2 * video).astype(np.float32)), label
        return to_unit_range(video), label
