"""Image dataset "shapes": 2-4 flat shapes; the label is where the red shape is relative to the blue one.

Each image holds one red and one blue object and 0-2 distractors (green / yellow / white),
each a circle, square or triangle. Objects do not overlap and the red and blue centres differ
by at least 3 px along both axes (at 32 px). Two ways to grow the image (``growth``):

- ``"canvas"`` (default): objects have the same pixel size (radius 4 px) at every image size,
  so a 64 px image is a larger field with more patches (and more room), not a zoomed 32 px one.
- ``"zoom"``: the scene is laid out at 32 px and drawn at ``image_size`` with every length
  (centres, radius 4 px, gaps) multiplied by ``image_size / 32``: item ``i`` at 64 px is item
  ``i`` at 32 px rendered at twice the resolution (same label, same layout; Heo et al. 2024's
  "higher resolution" test). At 32 px both modes give the same items.

Classes::

    label = 2 * (red above blue) + (red left of blue)
    0 below-right   1 below-left   2 above-right   3 above-left

Colours and shape types are independent of the label: only positions decide it. Pixels
are in [0, 1] then normalised with mean = std = 0.5, item ``(float (3, S, S), int)``.
"""
from __future__ import annotations

import numpy as np

from ._base import SyntheticDataset, check_choice, check_min, to_unit_range

COLORS = {"red": (1.0, 0.0, 0.0), "blue": (0.0, 0.0, 1.0), "green": (0.0, 1.0, 0.0), "yellow": (1.0, 1.0, 0.0), "white": (1.0, 1.0, 1.0)}
SHAPES = ("circle", "square", "triangle")
CLASSES = ("below-right", "below-left", "above-right", "above-left")
RADIUS, MIN_GAP, MIN_AXIS_GAP = 4.0, 1.0, 3.0
GROWTHS = ("canvas", "zoom")
BASE_SIZE = 32  # zoom: the scene is laid out on a 32 px field, then scaled by image_size / 32


def relation(red_rc, blue_rc) -> int:
    """Label of a (row, col) pair: ``2 * (red above blue) + (red left of blue)``."""
    return 2 * int(red_rc[0] < blue_rc[0]) + int(red_rc[1] < blue_rc[1])


def shape_mask(shape: str, center_rc, size: int, radius: float = RADIUS) -> np.ndarray:
    """Boolean ``(size, size)`` mask of one shape of ``radius`` centred at ``center_rc`` (pixel units)."""
    rows, cols = np.meshgrid(np.arange(size) + 0.5, np.arange(size) + 0.5, indexing="ij")  # pixel centres
    dr, dc = rows - center_rc[0], cols - center_rc[1]
    if shape == "circle":
        return dr**2 + dc**2 <= radius**2
    if shape == "square":
        return np.maximum(np.abs(dr), np.abs(dc)) <= 0.8 * radius
    # upward triangle: apex at the top, base 0.8 R below the centre
    depth = (dr + radius) / (1.8 * radius)  # 0 at the apex, 1 at the base
    return (depth >= 0) & (depth <= 1) & (np.abs(dc) <= depth * radius)


class Shapes(SyntheticDataset):
    """Relation of the red object to the blue one, 4 classes.

    >>> image, label = Shapes("train", image_size=48)[0]
    >>> image.shape, label in range(4)
    (torch.Size([3, 48, 48]), True)
    >>> small, big = Shapes("test", growth="zoom")[0], Shapes("test", growth="zoom", image_size=64)[0]
    >>> small[1] == big[1], big[0].shape   # the same scene, twice the resolution
    (True, torch.Size([3, 64, 64]))
    """

    name, domain, task = "shapes", "image", "classify"
    num_classes, classes = 4, CLASSES
    order_blind_groups = [0, 0, 0, 0]  # only positions decide the label: blind to them, every label looks alike

    def __init__(self, split: str, *, seed: int = 0, image_size: int = 32, size: int | None = None,
                 growth: str = "canvas"):
        super().__init__(split, seed=seed, size=size)
        check_min("image_size", image_size, 32)  # room for 4 non-overlapping objects
        check_choice("growth", growth, GROWTHS)
        self.image_size, self.growth = int(image_size), growth
        # canvas: lay out and draw at image_size; zoom: lay out at 32 px, draw scaled by image_size / 32
        self.layout_size = self.image_size if growth == "canvas" else BASE_SIZE

    def sample_centres(self, rng, count: int) -> np.ndarray:
        """``(count, 2)`` non-overlapping (row, col) centres; rows 0 and 1 are red and blue."""
        low, high = RADIUS + 0.5, self.layout_size - RADIUS - 0.5
        while True:
            centres = rng.uniform(low, high, (count, 2))
            dist = np.linalg.norm(centres[:, None] - centres[None], axis=-1) + np.eye(count) * 1e9
            if dist.min() >= 2 * RADIUS + MIN_GAP and np.abs(centres[0] - centres[1]).min() >= MIN_AXIS_GAP:
                return centres

    def make(self, rng):
        count = int(rng.integers(2, 5))
        names = ["red", "blue", *rng.choice(["green", "yellow", "white"], count - 2, replace=False)]
        centres = self.sample_centres(rng, count)
        scale = self.image_size / self.layout_size  # 1 for canvas
        image = np.zeros((3, self.image_size, self.image_size), np.float32)
        for colour, centre in zip(names, centres):
            mask = shape_mask(SHAPES[rng.integers(len(SHAPES))], centre * scale, self.image_size, RADIUS * scale)
            image[:, mask] = np.asarray(COLORS[colour], np.float32)[:, None]
        return to_unit_range(image), relation(centres[0], centres[1])
