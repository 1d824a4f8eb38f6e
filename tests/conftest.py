"""Shared test helpers: how to build any registered kind with the options it requires."""
from __future__ import annotations

import pytest
import torch

import ndpe

torch.set_num_threads(1)

# Options a kind needs in the generic contract tests (everything else uses the kind's defaults).
REQUIRED_OPTIONS = {
    "learned": lambda dims: {"grid_shape": (6,) * dims, "resize": {1: "linear", 2: "bicubic", 3: "trilinear"}[dims]},
}

# (kind, dims) pairs for every registered kind.
KIND_DIMS = [(k, d) for k, ds in ndpe.available().items() for d in ds]


def build(kind: str, dims: int, *, dim: int = 48, heads: int = 2, **opts):
    """``ndpe.make`` with the options ``kind`` requires for a small test grid."""
    options = {**REQUIRED_OPTIONS.get(kind, lambda d: {})(dims), **opts}
    return ndpe.make(dims=dims, kind=kind, dim=dim, heads=heads, **options)


def needs_kind(*kinds: str):
    """Skip a test when a kind it names is not registered."""
    missing = [k for k in kinds if k not in ndpe.available()]
    return pytest.mark.skipif(bool(missing), reason=f"kinds not registered: {missing}")
