"""``prope``: PRoPE, projective positional encoding (Li et al. 2025, "Cameras as Relative Positional Encoding"),
with one camera per token.

GTA (``gta``) with the whole camera: each token's matrix is its projection ``P = lift(K) E`` (``E`` the world-to-camera
extrinsic, ``K`` the intrinsics normalized by the image size, lifted to 4 x 4), an ``image <- world`` map, so
``q_i . k_j`` sees ``P_i P_j^-1 = K_i E_i E_j^-1 K_j^-1``: the relative pose *and* both cameras' lenses, still
unchanged by a change of world frame. As in the authors' code (liruilong940607/prope, ``prope/per_token_camera.py``,
ported in ``tests/test_prope.py``): intrinsics ``(fx, fy, cx, cy)`` in pixels become ``(fx / W, fy / H, cx / W - 1/2,
cy / H - 1/2)`` (no skew: a ``K`` with one, or with a bottom row other than ``(0, 0, 1)``, is refused),
``P^-1 = E^-1 lift(K^-1)``, and the channels are laid out as
``gta``'s (``P`` repeated on half of each head, 2D RoPE of the patch on the other half, ``theta`` 100).

Cameras: ``pe(grid_shape, extrinsics=E, intrinsics=K)``, ``E`` ``(N, 4, 4)`` and ``K`` ``(N, 3, 3)`` (or with a
batch axis first), one per grid token. Without them, ``gta``'s ring of cameras with ``fx = fy = W``, ``c = (W/2,
H/2)`` (a 53-degree field of view): then ``K`` normalizes to the identity and PRoPE equals GTA.

>>> import ndpe, torch
>>> pe = ndpe.make(dims=3, kind="prope", dim=64, heads=2, image_size=(224, 224))
>>> e = torch.eye(4).expand(24, 4, 4)
>>> k = torch.tensor([[200.0, 0, 112], [0, 200, 112], [0, 0, 1]]).expand(24, 3, 3)
>>> pe((2, 3, 4), extrinsics=e, intrinsics=k).frame[0].shape
torch.Size([1, 24, 128])
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from ..checks import per_axis
from ..registry import register
from .gta import GTA, invert_se3


def normalized_intrinsics(intrinsics: Tensor, image_size: tuple[float, float]) -> tuple[Tensor, Tensor]:
    """``lift(K)`` and ``lift(K^-1)`` ``(..., 4, 4)`` of pixel intrinsics ``(..., 3, 3)`` normalized by the image's
    ``(height, width)`` as PRoPE does: ``fx / W``, ``fy / H``, ``cx / W - 1/2``, ``cy / H - 1/2``."""
    h, w = image_size
    fx, fy = intrinsics[..., 0, 0] / w, intrinsics[..., 1, 1] / h
    cx, cy = intrinsics[..., 0, 2] / w - 0.5, intrinsics[..., 1, 2] / h - 0.5
    zero, one = torch.zeros_like(fx), torch.ones_like(fx)

    def lift(a, b, c, d):  # [[a, 0, c, 0], [0, b, d, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
        rows = [a, zero, c, zero, zero, b, d, zero, zero, zero, one, zero, zero, zero, zero, one]
        return torch.stack(rows, -1).unflatten(-1, (4, 4))

    return lift(fx, fy, cx, cy), lift(1 / fx, 1 / fy, -cx / fx, -cy / fy)


MAX_CONDITION = 1e4
"""The largest condition number ``|lift(K)| |lift(K^-1)|`` (row-sum norms) of normalized intrinsics: float32's
rounding then leaves ``P P^-1`` within about 1e-3 of the identity."""


def check_intrinsics(intrinsics, extrinsics: Tensor) -> Tensor:
    """Pixel intrinsics ``(..., N, 3, 3)`` with the extrinsics' leading dims: finite, positive focal lengths, no skew
    (PRoPE reads none) and the bottom row ``(0, 0, 1)``; returned as float32."""
    if not isinstance(intrinsics, Tensor) or not intrinsics.is_floating_point() \
            or intrinsics.shape[-2:] != (3, 3) or intrinsics.shape[:-2] != extrinsics.shape[:-2]:
        got = tuple(intrinsics.shape) if isinstance(intrinsics, Tensor) else type(intrinsics).__name__
        raise ValueError(f"intrinsics must be a floating tensor of 3 x 3 pixel intrinsics, one per grid token like the "
                         f"extrinsics {tuple(extrinsics.shape[:-2])} + (3, 3), got {got}")
    if intrinsics.device.type == "meta":
        raise ValueError("intrinsics are on the meta device (shape only, no values); pass real cameras")
    k = intrinsics.float()
    if torch.compiler.is_compiling():
        return k
    if not bool(torch.isfinite(k).all()):
        raise ValueError("intrinsics contain NaN or inf; expected finite pixel intrinsics")
    if not bool((k[..., 0, 0] > 0).all() and (k[..., 1, 1] > 0).all()):
        raise ValueError("intrinsics need positive focal lengths fx = K[0, 0] and fy = K[1, 1]")
    focal, skew = k.diagonal(0, -2, -1)[..., :2], torch.stack([k[..., 0, 1], k[..., 1, 0]], -1)
    if not bool((skew.abs() <= 1e-4 * focal).all()):
        raise ValueError("intrinsics must have no skew (K[0, 1] = K[1, 0] = 0): PRoPE's lift(K) reads fx, fy, cx, cy "
                         "only")
    if not torch.allclose(k[..., 2, :], torch.tensor([0.0, 0.0, 1.0], device=k.device).expand_as(k[..., 2, :]),
                          rtol=0.0, atol=1e-6):
        raise ValueError("intrinsics must have the bottom row (0, 0, 1) of a pinhole camera's K (divide K by K[2, 2])")
    return k


def check_conditioning(lift_k: Tensor, lift_k_inv: Tensor) -> None:
    """Refuse (one line) normalized intrinsics whose condition number passes :data:`MAX_CONDITION`."""
    if torch.compiler.is_compiling():
        return
    condition = float(lift_k.abs().sum(-1).amax() * lift_k_inv.abs().sum(-1).amax())
    if not condition <= MAX_CONDITION:
        raise ValueError(f"intrinsics are ill-conditioned for PRoPE (|K| |K^-1| = {condition:.3g}, past "
                         f"{MAX_CONDITION:g}: P P^-1 would be far from I in float32): focal lengths far below the "
                         "image size or principal points far outside it; check image_size= and the units")


@register("prope", dims=(2, 3))
class PRoPE(GTA):
    """PRoPE: GTA with each token's projection ``lift(K) E`` for its camera (module doc).

    Args:
        image_size: ``(height, width)`` of the images in the intrinsics' units (pixels); ``(1, 1)`` for intrinsics
            already divided by the image size.
        theta: the frequency base of the patch rotations (the reference's 100).
    """

    description = "PRoPE (Li et al. 2025): GTA with each token's projection lift(K) E, the camera's lens included"
    colour, marker = "#2166ac", "X"
    takes_intrinsics = True

    def __init__(self, *, dims: int, dim: int, heads: int = 1, image_size: float | Sequence[float] = (1.0, 1.0),
                 theta: float = 100.0):
        super().__init__(dims=dims, dim=dim, heads=heads, theta=theta)
        self.image_size = per_axis(image_size, 2, "image_size", low=0.0, inclusive=False)

    def projections(self, extrinsics: Tensor, intrinsics: Tensor | None) -> tuple[Tensor, Tensor]:
        """``P = lift(K) E`` and ``P^-1 = E^-1 lift(K^-1)`` ``(..., N, 4, 4)``; the ring's intrinsics when None."""
        if intrinsics is None:  # the default cameras: f = W, H and the image's centre, so K normalizes to I
            h, w = self.image_size
            intrinsics = torch.tensor([[w, 0.0, w / 2], [0.0, h, h / 2], [0.0, 0.0, 1.0]], device=extrinsics.device)
            intrinsics = intrinsics.expand(*extrinsics.shape[:-2], 3, 3)
        lift_k, lift_k_inv = normalized_intrinsics(check_intrinsics(intrinsics, extrinsics), self.image_size)
        check_conditioning(lift_k, lift_k_inv)
        return lift_k @ extrinsics, invert_se3(extrinsics) @ lift_k_inv
