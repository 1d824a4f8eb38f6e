"""Small conv nets for coordinate regression, with or without CoordConv's ``AddCoords`` (Liu et al. 2018).

``arch="default"`` (today's net): every conv layer sees the [-1, 1] coordinate channels when
``add_coords`` is on (CoordConv layers); without them a conv net only learns position from padding
effects. Global average pooling makes the net run on any input size.

The other ``arch`` values are the networks of the paper's *supervised coordinate regression*
experiment (one-hot pixel -> its coordinates, dataset ``onehot_pixel``), as built in the official
code: uber-research/CoordConv, ``model_builders.py`` (class ``ConvRegressor``, commit 27fab8b),
chosen by ``train.py`` (``--arch coordconv_regressor`` / ``conv_regressor``; the conv net is
``big_conv`` for a ``*uniform*`` data file and ``big_conv2`` otherwise) and run as listed in
``experiment_logs.sh`` ("Section 4.2 Supervised Coordinate Regression"):

- ``coordconv_regressor`` (``coordconv_model``): AddCoords once at the input (no radius), then
  conv 1x1 -> 8, 1x1 -> 8, 1x1 -> 8, 3x3 -> 8, 3x3 -> 2, all stride 1, 'same' padding and **no
  nonlinearity or normalisation**, then a global **max** pool over the 64x64 map -> 2 outputs.
  Trained with Adam lr 0.01, L2 1e-5, 100 epochs, minibatch 256 (the ``util.py`` default).
- ``conv_uniform`` (``big_conv``, the uniform-split baseline): 4 x [conv 3x3 -> 16, ReLU], a 2x2
  max pool after each of the first three, flatten (16 x 8 x 8 at 64x64), dense 64, ReLU, dense 2.
- ``conv_quadrant`` (``big_conv2``, the quadrant-split baseline): conv 5x5/2 -> 16, ReLU; 1x1, ReLU;
  BN; 3x3, ReLU; 3x3/2, ReLU; 3x3/2, BN, ReLU; 3x3/2, ReLU; 1x1, ReLU; 3x3/2, ReLU; 3x3 -> 2, (ReLU);
  global average pool. (All 16 channels, ``mul=1`` as in ``experiment_logs.sh``.) Conv baselines
  were swept over Adam lr {5e-4, 1e-3, 1e-2} x L2 {1e-5, 1e-4, 5e-4}, 100 epochs.

Deviations, chosen as the closest faithful design: the paper's targets are (x, y) / 64 > 0, so its
``big_conv2`` ends in a ReLU before the pool; our targets are in [-1, 1], so that last ReLU is dropped
(it would clamp every negative coordinate to 0). ``conv_uniform`` pools the last map to 8 x 8
(``AdaptiveAvgPool2d``, the identity at 64x64) before the flatten so the net also runs at other
sizes. TF's 'same' padding of strided convs pads bottom/right; PyTorch pads symmetrically (same
output sizes). Weights use He-normal (convs; the code's ``he_normal``) and Glorot-uniform (dense, the
TF default) with zero biases. ``add_coords`` on a paper arch adds the coordinate channels once at
the input, as the paper's CoordConv regressor does; ``coordconv_regressor`` with ``add_coords=False``
is the same linear stack without coordinates (which cannot solve the task).

Deviation of ``coordconv_regressor`` (with ``add_coords``), for reliable training at a small budget:
its **value-path initialization** (``value_gain``, default 10; ``value_gain=0`` restores the paper's
plain He-normal init). The net is linear and ends in a global max pool, so only the argmax pixel of
each output map gets a gradient. Under the paper's init the hot pixel's contribution (random sign,
O(1)) is swamped by the coordinate terms (He-normal on a 5-layer linear stack doubles the variance per
layer: their range over the image is ~10 in [-1, 1] output units), so the max sits at an image corner
for every input, no gradient reaches the input-value weights and the net predicts a constant (on
one thread at 300 steps x batch 32, the paper's init failed on all 6 (split, seed) runs; the paper
trained ~60x longer, 100 epochs at batch 256). So the paper's layers are kept but initialized as a
*value skip path*: channel 0 of the first conv copies the image x ``value_gain`` and every later conv
carries it unchanged (a Dirac centre tap; no other channel reads it, it reads no other channel); the
last conv adds it to both outputs with bias ``-value_gain``, and the first conv's coordinate weights
start at zero (the other weights stay He-normal). At init every output is then exactly 0 and the hot
pixel is the unique max of both output maps (by ``value_gain``) for every seed and position, so the
coordinate weights get their gradient there from the first step; the coordinate map the task needs
(range ~2 per output) stays far below the gain, so the hot pixel keeps winning during training.
This is the structure of the exact solution (see ``tests/test_data_coord.py``) minus its coordinate
weights, which are learned. Zeroing the coordinate weights matters as much as the gain: with them
He-normal, a gain of 10 still lost the max for some seeds.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

ARCHS = ("default", "coordconv_regressor", "conv_uniform", "conv_quadrant")
VALUE_GAIN = 10.0  # coordconv_regressor: default gain of its value-path init (0 = the paper's He-normal init)


def _conv(c_in: int, c_out: int, k: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(c_in, c_out, k, stride=stride, padding=k // 2)


def _paper_layers(arch: str, c_in: int, num_classes: int) -> list[nn.Module]:
    """The layer stack of the paper's ``ConvRegressor`` for ``arch`` (after any AddCoords)."""
    if arch == "coordconv_regressor":
        return [_conv(c_in, 8, 1), _conv(8, 8, 1), _conv(8, 8, 1), _conv(8, 8, 3), _conv(8, num_classes, 3),
                nn.AdaptiveMaxPool2d(1), nn.Flatten()]
    w = 16
    if arch == "conv_uniform":
        return [_conv(c_in, w, 3), nn.ReLU(), nn.MaxPool2d(2), _conv(w, w, 3), nn.ReLU(), nn.MaxPool2d(2),
                _conv(w, w, 3), nn.ReLU(), nn.MaxPool2d(2), _conv(w, w, 3), nn.ReLU(),
                nn.AdaptiveAvgPool2d(8), nn.Flatten(), nn.Linear(w * 64, 64), nn.ReLU(), nn.Linear(64, num_classes)]
    bn = lambda: nn.BatchNorm2d(w, momentum=0.1, eps=1e-5)  # noqa: E731  (TF momentum 0.9)
    return [_conv(c_in, w, 5, 2), nn.ReLU(), _conv(w, w, 1), nn.ReLU(), bn(), _conv(w, w, 3), nn.ReLU(),
            _conv(w, w, 3, 2), nn.ReLU(), _conv(w, w, 3, 2), bn(), nn.ReLU(), _conv(w, w, 3, 2), nn.ReLU(),
            _conv(w, w, 1), nn.ReLU(), _conv(w, w, 3, 2), nn.ReLU(), _conv(w, num_classes, 3),
            nn.AdaptiveAvgPool2d(1), nn.Flatten()]


class ConvNet(nn.Module):
    """``(B, C, H, W) -> (B, num_classes)`` (``num_classes = 2`` for a (row, col) target).

    Args:
        channels: widths of the ``default`` arch (default (16, 32, 32)); the paper archs fix their own.
        add_coords: CoordConv: [-1, 1] coordinate channels before every conv (``default``) or once at
            the input (paper archs).
        with_r: also the radius channel (needs ``add_coords``).
        arch: ``"default"`` or a network of the paper's coordinate regression experiment:
            ``"coordconv_regressor"``, ``"conv_uniform"``, ``"conv_quadrant"`` (see the module docstring).
        value_gain: ``coordconv_regressor`` with ``add_coords`` only: the gain of the value skip path
            it is initialized with (default 10; 0 = the paper's plain He-normal init; see the module
            docstring).

    >>> import torch
    >>> m = ConvNet(num_classes=2, channels=(8, 16), add_coords=True)
    >>> m(torch.randn(2, 1, 64, 64)).shape, m(torch.randn(2, 1, 96, 80)).shape
    (torch.Size([2, 2]), torch.Size([2, 2]))
    >>> ConvNet(num_classes=2, arch="coordconv_regressor", add_coords=True)(torch.zeros(3, 1, 64, 64)).shape
    torch.Size([3, 2])
    """

    def __init__(self, *, num_classes: int, channels: Sequence[int] | None = None, in_chans: int = 1,
                 add_coords: bool = False, with_r: bool = False, arch: str = "default",
                 value_gain: float | None = None):
        super().__init__()
        if not add_coords and with_r:
            raise ValueError("with_r=True needs add_coords=True")
        if arch not in ARCHS:
            raise ValueError(f"arch={arch!r} is not supported; expected one of {ARCHS}")
        if value_gain is not None and not (arch == "coordconv_regressor" and add_coords):
            raise ValueError("value_gain applies to arch='coordconv_regressor' with add_coords=True only")
        if value_gain is not None and value_gain < 0:
            raise ValueError(f"value_gain must be >= 0, got {value_gain}")
        self.arch = arch
        extra = (2 + int(with_r)) if add_coords else 0
        if add_coords:
            from ndpe.kinds.coord import AddCoords  # lazy: the conv baseline works without it
        if arch != "default":
            if channels is not None:
                raise ValueError(f"arch={arch!r} fixes its own widths (the paper's); leave channels unset (null)")
            layers = ([AddCoords(2, with_r=with_r)] if add_coords else []) + _paper_layers(arch, in_chans + extra, num_classes)
            self.features, self.head = nn.Sequential(*layers), nn.Identity()
            self._init_like_tf()
            if arch == "coordconv_regressor" and add_coords:
                self._init_value_path(in_chans, VALUE_GAIN if value_gain is None else float(value_gain))
            self.to(memory_format=torch.channels_last)  # with channels-last inputs: ~2x faster on CPU
            return
        layers, c_in = [], in_chans
        for i, c in enumerate((16, 32, 32) if channels is None else channels):
            if add_coords:
                layers.append(AddCoords(2, with_r=with_r))
            layers += [nn.Conv2d(c_in + extra, c, 3, stride=1 if i == 0 else 2, padding=1), nn.BatchNorm2d(c), nn.ReLU()]
            c_in = c
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, num_classes)

    def _init_like_tf(self) -> None:
        """He-normal convs, Glorot-uniform dense layers, zero biases (the paper's code / TF defaults)."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    @torch.no_grad()
    def _init_value_path(self, in_chans: int, gain: float) -> None:
        """``coordconv_regressor``: a value skip path on channel 0, zero coordinate weights (module docstring)."""
        if gain == 0:
            return  # the paper's init
        first, *middle, last = [m for m in self.features if isinstance(m, nn.Conv2d)]
        first.weight.zero_()  # no coordinate weights; channels 1.. start at 0 and learn the coordinates
        first.weight[0, :in_chans] = gain  # channel 0 = gain x image
        for conv in middle:  # channel 0 carried unchanged (centre tap), kept apart from the other channels
            c = conv.kernel_size[0] // 2
            conv.weight[0].zero_()
            conv.weight[:, 0].zero_()
            conv.weight[0, 0, c, c] = 1.0
        c = last.kernel_size[0] // 2
        last.weight[:, 0].zero_()
        last.weight[:, 0, c, c] = 1.0
        last.bias.fill_(-gain)  # every output is 0 at init; the hot pixel wins the max by `gain`

    def forward(self, x: Tensor) -> Tensor:
        if self.arch != "default":  # channels-last weights and inputs: ~2x faster on CPU
            x = x.contiguous(memory_format=torch.channels_last)
        x = self.features(x)  # default: (B, c, h, w); paper archs: (B, num_classes)
        if self.arch != "default":
            return self.head(x)
        return self.head(x.mean((2, 3)))  # (B, num_classes)
