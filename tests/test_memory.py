"""Table-driven tests of the memory budget (:mod:`ndpe.memory`): every kind estimates from shapes, before allocating.

Every row: (id, budget in bytes, thunk, expected). ``expected`` is ``(MemoryError, fragment)`` (or another error
type: a call refused for another reason first), or ``OK`` (the call must succeed, optionally with a check of its
result). Every kind meets a huge grid, a huge ``past=`` and a huge option at the default budget (1 GiB); modest
sizes meet a small budget, and each estimate is pinned at its boundary: the budget equal to the estimate passes, one
byte less refuses. Refused calls are run under the profiler: no allocation above the budget happened before the
refusal. Huge sizes are terabytes, so that a check that goes missing makes the allocator fail at once instead of
filling the machine's memory.
"""
from __future__ import annotations

import contextlib
import math

import pytest
import torch

import ndpe
from ndpe import catalog
from ndpe.augment import RandomPositions
from ndpe.coords import axis_coords
from ndpe.memory import DEFAULT_BUDGET, coords_bytes

from conftest import build

GIB = DEFAULT_BUDGET
MIB = 1 << 20
HUGE = 10 ** 6  # a huge grid: (HUGE, HUGE), 10^12 tokens
PAST = 2 ** 40  # a huge KV cache
OK = "ok"


@contextlib.contextmanager
def memory_budget(nbytes):
    previous = ndpe.set_memory_budget(nbytes)
    try:
        yield
    finally:
        ndpe.set_memory_budget(previous)


def kind_dims(kind):
    dims = ndpe.available()[kind]
    return 2 if 2 in dims else min(dims)


def call(kind, grid=None, *, dims=None, dim=48, heads=2, opts=None, **kw):
    """Build ``kind`` (with the options its example needs) and call it on ``grid``."""
    def run():
        pe = build(kind, dims or kind_dims(kind), dim=dim, heads=heads, **(opts or {})).eval()
        return pe(grid, **kw)
    return run


def make(kind, *, dims=1, dim=48, heads=2, **opts):
    return lambda: build(kind, dims, dim=dim, heads=heads, **opts)


def logits(kind, n, *, batch=1, heads=2, dim=48, positions=None, **opts):
    """Encode ``n`` tokens (or ``positions``) with a logits kind, then evaluate its term on random q, k."""
    def run():
        pe = build(kind, 1, dim=dim, heads=heads, **opts).eval()
        pos = pe((n,)) if positions is None else pe(positions=positions)
        tokens = n if positions is None else positions.shape[-2]
        q = k = torch.randn(batch, heads, tokens, dim // heads)
        return pos.logits(q, k)
    return run


KINDS = sorted(ndpe.available())
# read from each kind: it sizes its bias (pair_words), takes the keys' positions to decode, pairs queries with keys
BIAS_KINDS = tuple(k for k in KINDS if build(k, kind_dims(k)).pair_words() is not None)
KEY_KINDS = tuple(k for k in KINDS if ndpe.registry.kind_class(k).takes_key_positions and k not in BIAS_KINDS
                  and 1 in ndpe.available()[k])  # 1D kinds that take key positions and build no bias
ID_TABLE_KINDS = ("abacus",)  # a per-token kind whose place ids index a fixed table: a huge past= is past its end
PAIR_KINDS = tuple(k for k in KINDS if {"bias", "logits"} & set(catalog.acts_by(k).split()))


def huge_grid_case(kind):
    dims = kind_dims(kind)
    grid = (HUGE ** 2,) if dims == 1 else (HUGE, HUGE) + (1,) * (dims - 2)
    if kind in BIAS_KINDS:
        expect = f"{kind} bias for grid {grid} (+0 prefix) is a (2, {HUGE ** 2}, {HUGE ** 2}) float32 tensor"
    else:
        expect = f"coordinates of grid {grid} ({HUGE ** 2} tokens x {dims} float32)"
    return (f"{kind} huge grid", GIB, call(kind, grid), (MemoryError, expect))


def huge_past_case(kind):
    dims = min(ndpe.available()[kind])  # rope-mixed is 2D/3D only, videorope 3D
    normalized = build(kind, dims).coords_mode != "index"  # normalized coordinates refuse past= anyway
    opts = {"coords": "index"} if normalized else {}
    thunk = call(kind, (1,) * dims, dims=dims, opts=opts, past=PAST)
    if dims > 1:  # past= needs a token order: refused before anything is sized
        expect = (ValueError, "needs a token order, dims=1")
    elif kind in ID_TABLE_KINDS:
        expect = (ValueError, "build it with a larger")
    elif kind in BIAS_KINDS:
        expect = (MemoryError, f"{kind} bias for grid ({PAST + 1},) (+0 prefix) is a (2, 1, {PAST + 1}) float32 tensor")
    elif kind in KEY_KINDS:
        expect = (MemoryError, f"{kind} keys for decoding past={PAST} + 1 new tokens ({PAST + 1} float32 key "
                  "coordinates)")
    elif kind in PAIR_KINDS:  # pairs queries with keys without taking the keys' positions: refuses past=
        expect = (ValueError, "does not declare takes_key_positions")
    else:  # per-token kinds build the new positions only: nothing of size past
        expect = OK
    return (f"{kind} huge past", GIB, thunk, expect)


HUGE_OPTIONS = [
    ("alibi huge dim", GIB, make("alibi", dim=2 ** 40, heads=1), (MemoryError, "alibi per-channel buffers for "
                                                                            "dim=1099511627776, dims=1, heads=1")),
    ("complex huge dim", GIB, make("complex", dim=2 ** 40), (MemoryError, "complex per-channel buffers")),
    ("complex token frequencies", GIB, make("complex", dim=2 ** 20, token_frequencies=True),
     (MemoryError, "complex token-frequency map 524288x1048576 floats")),
    ("coord huge dim", GIB, make("coord", dims=2, dim=2 ** 40), (MemoryError, "coord per-channel buffers")),
    ("cope max_pos", GIB, make("cope", max_pos=10 ** 12), (MemoryError, "cope position table 1000000000000x24 floats")),
    ("cope talking heads", GIB, make("cope", dim=2 ** 20, heads=2 ** 20, talking_heads=True),
     (MemoryError, "cope talking-heads matrix 1048576x1048576 floats")),
    ("cpb mlp_hidden", GIB, make("cpb", dims=2, mlp_hidden=10 ** 7, depth=2),
     (MemoryError, "cpb MLP (2 hidden layers of mlp_hidden=10000000")),
    ("fire mlp_width", GIB, make("fire", mlp_width=10 ** 12), (MemoryError, "fire MLP 1000000000000x5 floats")),
    ("fourier huge dim", GIB, make("fourier", dims=2, dim=2 ** 40), (MemoryError, "fourier per-channel buffers")),
    ("learned table", GIB, make("learned", dims=2, dim=384, grid_shape=(10 ** 5, 10 ** 5)),
     (MemoryError, "learned table 100000x100000x384 floats: ~14305.11 GiB")),
    ("learned factorized tables", GIB, make("learned", dims=2, grid_shape=(10 ** 12, 10 ** 12), factorized=True,
                                                 resize="linear"),
     (MemoryError, "learned axis-0 table 1000000000000x48 + axis-1 table 1000000000000x48 floats")),
    ("none huge dim", GIB, make("none", dim=2 ** 40), (MemoryError, "none per-channel buffers")),
    ("relative max_distance", GIB, make("relative", max_distance=10 ** 12),
     (MemoryError, "relative table 2000000000001x2 floats")),
    ("relative t5 num_buckets", GIB, make("relative", mode="t5", num_buckets=10 ** 12, max_distance=10 ** 13),
     (MemoryError, "relative table 1000000000000x2 floats")),
    ("rope huge dim", GIB, make("rope", dim=2 ** 40), (MemoryError, "rope per-channel buffers")),
    ("rope-mixed huge dim", GIB, make("rope-mixed", dims=2, dim=2 ** 40), (MemoryError, "rope-mixed per-channel")),
    ("sinusoidal huge dim", GIB, make("sinusoidal", dim=2 ** 40), (MemoryError, "sinusoidal per-channel buffers")),
    ("transformer-xl W_R", GIB, make("transformer-xl", dim=2 ** 20), (MemoryError, "transformer-xl W_R "
                                                                                 "1048576x1048576 floats")),
    ("xpos huge dim", GIB, make("xpos", dim=2 ** 40), (MemoryError, "xpos per-channel buffers")),
    ("random positions max_len", GIB, lambda: RandomPositions(dims=1, max_len=10 ** 12)(torch.zeros(4, 1), (4,)),
     (MemoryError, "random positions draw 1 x 1000000000000 float32 keys")),
]

# modest sizes against a 1 MiB budget: refused before anything of their size is allocated
SMALL = [
    ("learned table 2.4 MiB", MIB, make("learned", dims=2, dim=64, grid_shape=(100, 100)),
     (MemoryError, "learned table 100x100x64 floats: ~0.00238 GiB, over the 0.000977 GiB budget")),
    ("relative table", MIB, make("relative", max_distance=10 ** 5), (MemoryError, "relative table 200001x2 floats")),
    ("cope table", MIB, make("cope", max_pos=10 ** 5), (MemoryError, "cope position table 100000x24 floats")),
    ("transformer-xl W_R", MIB, make("transformer-xl", dim=1024), (MemoryError, "transformer-xl W_R 1024x1024")),
    ("fire MLP", MIB, make("fire", mlp_width=10 ** 5), (MemoryError, "fire MLP 100000x5 floats")),
    ("cpb MLP", MIB, make("cpb", style="dynamic", mlp_hidden=1024, depth=2),
     (MemoryError, "cpb MLP (2 hidden layers of mlp_hidden=1024")),
    ("complex token-frequency map", MIB, make("complex", dim=1024, token_frequencies=True),
     (MemoryError, "complex token-frequency map 512x1024 floats")),
    ("rope per-channel buffers", MIB, make("rope", dim=2 ** 17), (MemoryError, "rope per-channel buffers for "
                                                                             "dim=131072")),
    ("sinusoidal coordinates", MIB, call("sinusoidal", (300, 300)),
     (MemoryError, "coordinates of grid (300, 300) (90000 tokens x 2 float32)")),
    ("coords() for flex", MIB, lambda: build("alibi", 2).coords((300, 300)), (MemoryError, "coordinates of grid")),
    ("grid_coords", MIB, lambda: ndpe.grid_coords((300, 300)), (MemoryError, "coordinates of grid (300, 300)")),
    ("axis_coords", MIB, lambda: axis_coords(10 ** 6), (MemoryError, "coordinates of an axis of 1000000 points")),
    ("rope keys", MIB, call("rope", (1,), dims=1, past=10 ** 6),
     (MemoryError, "rope keys for decoding past=1000000 + 1 new tokens")),
    ("learned table for decoding", MIB, call("learned", (1,), dims=1, opts={"grid_shape": (2 * 10 ** 6,), "resize": None},
                               past=10 ** 6),
     (MemoryError, "learned table 2000000x48 floats")),  # its table first: the keys could never exceed it
    ("alibi bias", MIB, call("alibi", (512,), dims=1),
     (MemoryError, "alibi bias for grid (512,) (+0 prefix) is a (2, 512, 512) float32 tensor")),
    ("alibi decoding bias", MIB, call("alibi", (4,), dims=1, past=10 ** 5),
     (MemoryError, "alibi bias for grid (100004,) (+0 prefix) is a (2, 4, 100004) float32 tensor")),
    ("relative bias", MIB, call("relative", (16, 16)), (MemoryError, "relative bias for grid (16, 16)")),
    ("fire bias", MIB, call("fire", (100,), dims=1), (MemoryError, "fire bias for grid (100,)")),
    ("cpb per-pair MLP", MIB, call("cpb", None, dims=1, positions=torch.arange(40.0)[:, None] * 0.5),
     (MemoryError, "cpb evaluates its MLP per pair for fractional positions: 1600 pairs")),
    ("cpb table of offsets", MIB, call("cpb", None, dims=1, positions=torch.arange(64.0)[:, None] * 31),
     (MemoryError, "cpb evaluates its MLP on the table of distinct offsets: 3907 rows")),
    ("cope visibility mask", MIB, call("cope", (2048,), dims=1),
     (MemoryError, "cope visibility mask of 2048 queries x 2048 keys (1 x 2048 x 2048 bool)")),
    ("cope term", MIB, logits("cope", 256), (MemoryError, "cope logits term of one sample (2 heads x 256 queries x "
                                                          "256 keys")),
    ("transformer-xl offsets", MIB, call("transformer-xl", (256,), dims=1),
     (MemoryError, "transformer-xl offsets of 256 queries x 256 keys (1 x 256 x 256 pairs")),
    ("transformer-xl term", 3 * MIB, logits("transformer-xl", 300),
     (MemoryError, "transformer-xl logits term of one sample (2 heads x 300 queries x 300 keys")),
    ("transformer-xl projected offsets", MIB,
     call("transformer-xl", None, dims=1, positions=(torch.arange(100.0) ** 2)[:, None]),
     (MemoryError, "transformer-xl projected offsets (")),
    ("cope flex score_bias", MIB,
     lambda: build("cope", 1).score_bias(torch.arange(256.0)[:, None], q=torch.zeros(1, 2, 256, 24),
                                         k=torch.zeros(1, 2, 256, 24)),
     (MemoryError, "cope logits term of one sample")),
    ("transformer-xl flex score_bias", MIB,
     lambda: build("transformer-xl", 1).score_bias(torch.arange(256.0)[:, None], q=torch.zeros(1, 2, 256, 24),
                                                   k=torch.zeros(1, 2, 256, 24)),
     (MemoryError, "transformer-xl offsets of 256 queries x 256 keys")),
    ("random positions draw", MIB, lambda: RandomPositions(dims=1, max_len=10 ** 6)(torch.zeros(4, 1), (4,)),
     (MemoryError, "random positions draw 1 x 1000000 float32 keys")),
]


def boundary(name, nbytes, thunk, fragment, check=None):
    """The budget equal to the estimate passes (with ``check`` of the result), one byte less refuses."""
    return [(f"{name} at its estimate", nbytes, thunk, (OK, check)),
            (f"{name} one byte over", nbytes - 1, thunk, (MemoryError, fragment))]


def _pe(kind, dims=1, **opts):
    return build(kind, dims, **opts).eval()


BOUNDARIES = [
    *boundary("learned table", 4 * 100 * 100 * 64, make("learned", dims=2, dim=64, grid_shape=(100, 100)),
              "learned table 100x100x64", lambda pe: pe.table.shape == (100, 100, 64)),
    *boundary("relative table", 4 * (2 * 10 ** 5 + 1) * 2, make("relative", max_distance=10 ** 5), "relative table"),
    *boundary("cope table", 4 * 10 ** 5 * 24, make("cope", max_pos=10 ** 5), "cope position table"),
    *boundary("transformer-xl W_R", 4 * 1024 ** 2, make("transformer-xl", dim=1024), "transformer-xl W_R"),
    *boundary("grid coordinates", coords_bytes((300, 300)), lambda: ndpe.grid_coords((300, 300)),
              "coordinates of grid (300, 300)", lambda c: c.shape == (90000, 2)),
    *boundary("decoding keys", coords_bytes((10 ** 5 + 1,)), call("rope", (1,), dims=1, past=10 ** 5),
              "rope keys for decoding", lambda pos: pos.rot[0].shape == (1, 1, 12)),
    *boundary("alibi bias", _pe("alibi").bias_bytes(1, 512, 0), call("alibi", (512,), dims=1),
              "alibi bias for grid (512,)", lambda pos: pos.bias.shape == (2, 512, 512)),
    *boundary("alibi bias with prefix", _pe("alibi").bias_bytes(1, 512, 3), call("alibi", (512,), dims=1, num_prefix=3),
              "(+3 prefix) is a (2, 515, 515)", lambda pos: pos.bias.shape == (2, 515, 515)),
    *boundary("fire bias", _pe("fire").bias_bytes(1, 100, 0), call("fire", (100,), dims=1), "fire bias"),
    *boundary("cope term", _pe("cope").term_bytes(256, 256), logits("cope", 256), "cope logits term",
              lambda t: t.shape == (1, 2, 256, 256)),
    *boundary("transformer-xl term", _pe("transformer-xl").term_bytes(300, 300), logits("transformer-xl", 300),
              "transformer-xl logits term", lambda t: t.shape == (1, 2, 300, 300)),
    *boundary("transformer-xl offsets", 32 * 200 ** 2, call("transformer-xl", (200,), dims=1),
              "transformer-xl offsets of 200 queries"),
]

OTHERS = [
    # a logits term is counted per sample: a batch of 8 passes the budget of one sample's term
    ("cope term per sample of the batch", _pe("cope").term_bytes(256, 256), logits("cope", 256, batch=8),
     (OK, lambda t: t.shape == (8, 2, 256, 256))),
    # per-token kinds decode far into a cache without building its positions
    ("sinusoidal past=2**40 equals its explicit position", GIB,
     lambda: (_pe("sinusoidal")((1,), past=PAST).add, _pe("sinusoidal")(positions=torch.tensor([[float(PAST)]])).add),
     (OK, lambda out: torch.equal(*out))),
    ("budget off", None, make("learned", dims=1, grid_shape=(10 ** 6,), dim=64), (OK, None)),
]

def packed_flex(grids):
    """``ndpe.flex.packed_attention`` of alibi over samples of ``grids`` (1D), q, k, v of the packed length."""
    def run():
        from ndpe import flex
        pe = _pe("alibi")
        total = sum(math.prod(g) for g in grids)
        q = torch.randn(1, pe.heads, total, pe.head_dim)
        with torch.no_grad():
            return flex.packed_attention(q, q, q, pe, grids, compiled=False)
    return run


_TWO_SAMPLES = [_pe("alibi")((16,)), _pe("alibi")((12,))]  # (2, 16, 16) and (2, 12, 12) biases, 28 packed tokens
PACKING = [  # what grows with the square of the packed tokens, and M-RoPE ids
    ("pe.packed of 200 alibi samples of 16 x 16", GIB, lambda: _pe("alibi", 2).packed([(16, 16)] * 200),
     (MemoryError, "the packed bias of 200 samples (51200x51200 torch.float32")),
    ("pe.packed with num_prefix=10**6", GIB, lambda: _pe("rope", 2).packed([(2, 2)] * 2, num_prefix=10 ** 6),
     (MemoryError, "the packed bias of 2 samples (2000008x2000008")),
    ("ndpe.pack of 200 alibi outputs", GIB, lambda: ndpe.pack([_pe("alibi", 2)((16, 16))] * 200),
     (MemoryError, "the packed bias of 200 samples (2x51200x51200 torch.float32")),
    *boundary("ndpe.pack bias", 4 * 2 * 28 ** 2, lambda: ndpe.pack(_TWO_SAMPLES), "the packed bias of 2 samples",
              lambda pos: pos.bias.shape == (2, 28, 28)),
    ("mrope_positions of 10**10 text tokens", GIB, lambda: ndpe.mrope_positions([10 ** 10]),
     (MemoryError, "M-RoPE ids of 10000000000 tokens")),
    *boundary("M-RoPE ids", 48 * 1016, lambda: ndpe.mrope_positions([1000, (1, 4, 4)]), "M-RoPE ids of 1016 tokens",
              lambda ids: ids.shape == (1016, 3)),
    ("flex block mask of 2 x 300 packed tokens", MIB, packed_flex([(300,), (300,)]),
     (MemoryError, "flex block mask of 2 packed samples, 600 x 600 (query, key) pairs")),
    *boundary("flex block mask", 12 * 40 ** 2, packed_flex([(25,), (15,)]), "flex block mask of 2 packed samples",
              lambda out: out.shape == (1, 2, 40, 24)),
]

CASES = ([huge_grid_case(k) for k in KINDS] + [huge_past_case(k) for k in KINDS] + HUGE_OPTIONS + SMALL
         + BOUNDARIES + OTHERS + PACKING)


def largest_allocation(thunk):
    """Run ``thunk`` under the profiler: (its result or exception, the largest CPU allocation of one op in bytes,
    None when the profiler records no memory here)."""
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError:  # pragma: no cover
        profile = None
    result: object = None
    if profile is None:  # pragma: no cover
        try:
            result = thunk()
        except Exception as err:  # noqa: BLE001 - returned to the caller, who checks it
            result = err
        return result, None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        try:
            result = thunk()
        except Exception as err:  # noqa: BLE001 - returned to the caller, who checks it
            result = err
    sizes = [e.cpu_memory_usage for e in prof.events() if e.cpu_memory_usage > 0]
    return result, max(sizes, default=0)


@pytest.mark.parametrize("name,nbytes,thunk,expected", CASES, ids=[c[0] for c in CASES])
def test_memory_budget(name, nbytes, thunk, expected):
    with memory_budget(nbytes):
        result, largest = largest_allocation(thunk)
    if expected == OK or expected[0] == OK:
        if isinstance(result, Exception):
            raise result
        check = None if expected == OK else expected[1]
        assert check is None or check(result), f"{name}: unexpected result {result!r}"
        return
    exc, fragment = expected
    assert isinstance(result, exc), f"{name}: expected {exc.__name__}, got {result!r}"
    msg = str(result)
    assert fragment in msg, f"{name}: message {msg!r} lacks {fragment!r}"
    assert "\n" not in msg.strip(), f"{name}: message is not one line: {msg!r}"
    if exc is MemoryError:
        assert "GiB budget" in msg and "raise the budget with ndpe.set_memory_budget(bytes)" in msg, msg
        # refused before allocating: nothing the size of what was refused (nor of the budget) was allocated
        assert largest is None or largest <= nbytes, f"{name}: {largest} bytes allocated before the refusal"


def test_budgets_cover_every_kind_three_ways():
    refused = {c[0] for c in CASES}
    for kind in KINDS:
        assert f"{kind} huge grid" in refused and f"{kind} huge past" in refused
    assert len(CASES) >= 40


def test_set_bias_budget_is_the_memory_budget():
    with memory_budget(12345):
        assert ndpe.bias_budget() == ndpe.memory_budget() == 12345
        assert ndpe.set_bias_budget(777) == 12345
        assert ndpe.memory_budget() == 777
    assert ndpe.memory_budget() == DEFAULT_BUDGET
    with pytest.raises(TypeError, match="bias budget"):
        ndpe.set_bias_budget(1.5)
    with pytest.raises(TypeError, match="memory budget"):
        ndpe.set_memory_budget(1.5)
    with pytest.raises(ValueError, match="memory budget"):
        ndpe.set_memory_budget(0)
    assert ndpe.memory_budget() == DEFAULT_BUDGET


def test_the_learned_table_of_the_issue_is_refused_with_size_what_and_way_out():
    with pytest.raises(MemoryError) as info:
        ndpe.make(dims=2, kind="learned", dim=384, grid_shape=(10 ** 5, 10 ** 5))
    msg = str(info.value)
    assert msg.startswith(f"learned table 100000x100000x384 floats: ~{4 * 10 ** 10 * 384 / 2 ** 30:.2f} GiB")
    assert "smaller grid_shape" in msg and "ndpe.set_memory_budget(bytes)" in msg


def test_estimates_follow_the_shapes():
    cope, xl = _pe("cope", max_pos=16), _pe("transformer-xl")
    assert cope.term_bytes(10, 20) == 4 * 2 * 10 * (14 * 20 + 16)
    assert xl.term_bytes(10, 20) == 4 * 2 * 10 * (5 * 20 + 29)
    assert coords_bytes((3, 4)) == 4 * (7 + 2 * 12 * 2)
    assert math.prod((HUGE, HUGE)) == HUGE ** 2
