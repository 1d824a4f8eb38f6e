"""The figures of the absolute, bias and other kinds (docs/make_figures.py): sinusoidal, learned, ALiBi (plain and
data-dependent), PoPE, relative biases, coordinate channels, Fourier features, and every 1D kind side by side."""
from __future__ import annotations

import matplotlib.pyplot as plt
import torch

import ndpe
from ndpe.viz import (centre_index, color_scale, encoding_relation, kind_colour, make_figure, offset_curve, relation,
                      show_relation, style)

from figure_registry import VARIANT_LINES, figure, seeded
from figures_compare import camera_views  # noqa: F401 (registered there)


@figure("sinusoidal")
def sinusoidal_table():
    pe = seeded(dims=1, kind="sinusoidal", dim=128, layout="blocks")
    return make_figure("table", pe, (100,), name='sinusoidal, dim 128, layout="blocks"')


@figure("sinusoidal")
def sinusoidal_offset():
    pe = seeded(dims=1, kind="sinusoidal", dim=64)
    return make_figure("offset", pe, (64,), name="sinusoidal, dim 64")


@figure("sinusoidal")
def sinusoidal_2d_concat_vs_add():
    grid, query = (16, 16), (3, 11)
    index = query[0] * grid[1] + query[1]
    rel = {c: relation(seeded(dims=2, kind="sinusoidal", dim=64, combine=c)(grid), index) for c in ("concat", "add")}
    scale = color_scale(*rel.values())  # one scale: the two panels are compared
    fig, axes = plt.subplots(1, 2, figsize=(9, 4.2), layout="constrained")
    for ax, combine in zip(axes, rel):
        image = show_relation(ax, rel[combine], grid, index, scale)
        ax.plot(query[0], query[1], "o", mfc="none", mec="k", ms=9, mew=1.5)  # the mirror token (j, i)
        ax.set_title(f'combine="{combine}"')
    fig.colorbar(image, ax=axes, shrink=0.8, label=style.colourbar_label("relation", "cosine similarity"))
    fig.suptitle(f"2D sinusoidal, dim 64: similarity of token {query} (+) to all; circle: its mirror "
                 f"{query[::-1]}", fontsize=10)
    return fig


@figure("learned")
def learned_resize():
    """A learned 8x8 table resized bicubic to 16x16; its values are set to a smooth 2D pattern as a trained stand-in."""
    small, large = (8, 8), (16, 16)
    pe = seeded(dims=2, kind="learned", dim=32, grid_shape=small, resize="bicubic")
    with torch.no_grad():  # stand-in for a trained table: a smooth pattern (2D sinusoidal, temperature 16)
        smooth = ndpe.make(dims=2, kind="sinusoidal", dim=32, temperature=16.0)(small).add
        pe.table.copy_(smooth.reshape(*small, 32))
    fig, axes = plt.subplots(2, 2, figsize=(7.5, 7), layout="constrained", gridspec_kw={"width_ratios": [8, 16]})
    with torch.no_grad():
        grids = (small, large)
        channels = [pe(g).add[:, 2].reshape(g) for g in grids]  # channel 2 of (N, 32)
        rels = [relation(pe(g), centre_index(g)) for g in grids]
        channel_style, rel_style = color_scale(*channels, quantity="encoding"), color_scale(*rels)
        for col, grid in enumerate(grids):
            im0 = axes[0, col].imshow(channels[col].numpy(), interpolation="nearest", **channel_style)
            axes[0, col].set_title(f"channel 2, grid {grid}" + (" (stored)" if grid == small else " (bicubic)"),
                                   fontsize=9)
            axes[0, col].set(xlabel="column (axis 1)", ylabel="row (axis 0)")
            im1 = show_relation(axes[1, col], rels[col], grid, centre_index(grid), rel_style)
            axes[1, col].set_title("cosine similarity to the centre", fontsize=9)
    fig.colorbar(im0, ax=axes[0], shrink=0.8, label=style.colourbar_label("encoding", "channel 2"))
    fig.colorbar(im1, ax=axes[1], shrink=0.8, label=style.colourbar_label("relation", "cosine similarity"))
    fig.suptitle("learned 8x8 table (set to a smooth stand-in pattern) resized bicubic to 16x16", fontsize=10)
    return fig


@figure("alibi")
def alibi_1d_bias():
    pe = seeded(dims=1, kind="alibi", dim=64, heads=8)
    return make_figure("table", pe, (32,), name="alibi, 8 heads")


@figure("dd-alibi")
def dd_alibi_gates():
    """Data-dependent ALiBi's bias from the last token back, for gates set by hand: constant (ALiBi), and one
    token closing its gate (everything before it forgotten)."""
    from ndpe.kinds.dd_alibi import forget_bias
    n, m = 24, 0.1
    constant = torch.full((1, n, 1), -m)
    closing = constant.clone()
    closing[0, 12, 0] = torch.log(torch.tensor(0.02))  # token 12's gate: 0.02
    fig, ax = plt.subplots(figsize=(6.5, 3.4), layout="constrained")
    colour = kind_colour("dd-alibi")
    for gates, ls, label in ((constant, "-", f"every gate exp(-{m}): ALiBi's slope {m}"),
                             (closing, "--", "token 12 closes its gate (0.02)")):
        row = forget_bias(gates)[0, 0, -1]  # the last query's bias to every key
        ax.plot(range(n), row.numpy(), ls, color=colour, marker="o", ms=3, label=label)
    ax.set(xlabel="key position j (query at 23)", ylabel="bias = sum of log gates after j")
    ax.legend(fontsize=8)
    ax.set_title("dd-alibi (Forgetting Transformer): the bias is the log of the gates between key and query",
                 fontsize=9)
    return fig


@figure("pope")
def pope_what_where():
    """RoPE's logit against the offset moves with the content (its phase adds to the position's); PoPE's does not."""
    n, d = 65, 32
    query = n // 2
    g = torch.Generator().manual_seed(0)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), layout="constrained", sharey=False)
    for ax, kind in zip(axes, ("rope", "pope")):
        pe = seeded(dims=1, kind=kind, dim=d, heads=1)
        for sample in range(3):
            q = torch.randn(1, 1, 1, d, generator=g).expand(1, 1, n, d)
            k = torch.randn(1, 1, 1, d, generator=g).expand(1, 1, n, d)
            with torch.no_grad():
                pos = pe((n,))
                rq, rk = ndpe.apply_qk(q.contiguous(), k.contiguous(), pos)
                logits = rq @ rk.transpose(-1, -2) * d ** -0.5
                if pos.logits is not None:
                    logits = logits + pos.logits(rq, rk)
            ax.plot(range(n), logits[0, 0, query].numpy(), color=kind_colour(kind), alpha=1 - 0.3 * sample,
                    lw=1.2, label=f"content {sample + 1}")
        ax.axvline(query, color="0.5", ls=":", lw=1)
        ax.set(xlabel="key position (query at 32)", ylabel="logit")
        ax.set_title(f"{kind}: the same q and k at every position", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("Where the logit peaks: RoPE's peak moves with the content, PoPE's stays at offset 0 (phase offsets "
                 "0, the init)", fontsize=10)
    return fig


@figure("alibi")
def alibi_1d_heads():
    pe = seeded(dims=1, kind="alibi", dim=64, heads=8)
    return make_figure("heads", pe, (32,), name="alibi, slopes 1/2 .. 1/256")


@figure("alibi")
def alibi_2d_heads():
    pe = seeded(dims=2, kind="alibi", dim=64, heads=8)  # slopes 1/2 .. 1/256: bias -1 at distances 2, 4, 8, 16, ...
    return make_figure("heads", pe, (25, 25), name='alibi 2D, distance="euclidean", 8 heads')


@figure("relative")
def relative_2d_clip():
    pe = seeded(dims=2, kind="relative", dim=64, heads=4, max_distance=3)
    return make_figure("heads", pe, (15, 15), name="relative clip, max_distance 3, at init")


@figure("relative")
def relative_t5_offset():
    pe = seeded(dims=1, kind="relative", dim=64, heads=1, mode="t5", num_buckets=32, max_distance=128)
    with torch.no_grad():  # table row b set to b: the bias then reads as the bucket of each offset
        pe.table.copy_(torch.arange(pe.table.shape[0], dtype=torch.float32).reshape(pe.table.shape))
    offsets, values = offset_curve(pe, (64,))
    fig, ax = plt.subplots(figsize=(7, 3.8), layout="constrained")
    ax.step(offsets.numpy(), values.numpy(), where="mid", color=kind_colour("relative"))
    ax.axvline(-63, color="gray", ls=":", lw=1)
    ax.axvline(63, color="gray", ls=":", lw=1)
    ax.set(xlabel="offset (key - query)", ylabel="bucket (bias with table[b] = b)",
           title="relative t5, 32 buckets, max_distance 128: the bucket of each offset\n"
                 "(keys before the query: buckets 0-15, after: 16-31; dotted: largest offset of a 64 grid)")
    ax.title.set_fontsize(9)
    return fig


@figure("coord")
def coord_channels():
    grid = (8, 12)
    pe = seeded(dims=2, kind="coord", dim=64, with_r=True)
    cat = pe(grid).cat  # (N, 3)
    fig, axes = plt.subplots(1, 3, figsize=(10.5, 3.2), layout="constrained")
    scale = color_scale(cat, quantity="encoding")  # one scale for the three channels
    for ax, c, label in zip(axes, range(3), ("channel 0: row coordinate", "channel 1: column coordinate",
                                             "channel 2: r (distance to centre)")):
        image = ax.imshow(cat[:, c].reshape(grid).numpy(), interpolation="nearest", **scale)
        ax.set(title=label, xlabel="column (axis 1)", ylabel="row (axis 0)")
        ax.title.set_fontsize(9)
    fig.colorbar(image, ax=axes, shrink=0.8, label=style.colourbar_label("encoding", "coordinate"))
    fig.suptitle('coord, grid (8, 12), coords="pixel", with_r=True', fontsize=10)
    return fig


@figure("fourier")
def fourier_sigma():
    grid = (16, 16)
    q = centre_index(grid)
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.4), layout="constrained")
    sigmas = (0.5, 2.0, 8.0)
    rels = [relation(seeded(dims=2, kind="fourier", dim=128, sigma=sigma, seed=0)(grid), q) for sigma in sigmas]
    scale = color_scale(*rels)  # one scale, so the panels compare
    for ax, sigma, rel in zip(axes, sigmas, rels):
        image = show_relation(ax, rel, grid, q, scale)
        ax.set_title(f"sigma = {sigma:g}", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label=style.colourbar_label("relation", "cosine similarity"))
    fig.suptitle("fourier features, dim 128, pixel coords: similarity to the centre token", fontsize=10)
    return fig


NEW_1D_KINDS = {  # kind -> (options, what the panel's title adds)
    "xpos": ({"scale_base": 32.0}, "scale_base 32"),
    "complex": ({}, "frequencies at init"),
    "cope": ({"max_pos": 16}, "max_pos 16, table E ~ N(0, 1 / 64) stand-in"),
    "transformer-xl": ({}, "W_R, u, v at init"),
    "fire": ({}, "MLP at init"),
    "cpb": ({}, 'style "swin", MLP at init'),
}


@figure(*NEW_1D_KINDS)
def kinds_1d_middle_query():
    """One panel per 1D kind of issue 11: the relation of the middle query to every key, content terms for constant
    content (ndpe.viz.Content: one seeded q, k and token at every position)."""
    from ndpe.viz.figures import _causal_note, _what

    grid = (64,)
    query = centre_index(grid)
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.6), layout="constrained")
    for ax, (kind, (opts, note)) in zip(axes.flat, NEW_1D_KINDS.items()):
        pe = seeded(dims=1, kind=kind, dim=64, heads=1, **opts)
        if kind == "cope":  # its table starts at 0 (no term at all): a seeded stand-in for a trained one
            with torch.no_grad():
                pe.table.normal_(std=pe.head_dim ** -0.5, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            pos = pe(grid)
            rel = encoding_relation(pe, grid, query)
        show_relation(ax, rel, grid, query, color=kind_colour(kind))
        ax.set_title(f"{kind} ({note})\n{_what(pos)}{_causal_note(pos)}", fontsize=9)
        ax.set_ylabel(_what(pos), fontsize=8)
        ax.set_xlabel("key position", fontsize=8)
    fig.suptitle(f"1D kinds: relation of the middle query (position {query}, dotted) to every key, grid {grid}, "
                 "dim 64, 1 head\ncontent-dependent terms (logits, tokens) for one constant seeded q, k, token at "
                 "every position", fontsize=10)
    return fig


@figure("tape", "erpe")
def convtran_tape_erpe():
    """ConvTran's two encodings: tAPE's similarities depend on position / length alone (the same curve for any
    series length), the plain sinusoid's on the position; eRPE's term, added after the softmax, moves the weights by
    its own size, where the same term before the softmax hardly moves them."""
    dim = 32
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    for kind in ("sinusoidal", "tape"):
        for n, (ls, marker) in zip((32, 128), VARIANT_LINES):
            rel = relation(seeded(dims=1, kind=kind, dim=dim)((n,)), n // 2)
            axes[0].plot(torch.arange(n).numpy() / n, rel.numpy(), ls, color=kind_colour(kind), marker=marker, ms=2,
                         markevery=max(1, n // 32), label=f"{kind}, length {n}")
    axes[0].set(xlabel="position / length (query at 0.5)", ylabel="cosine similarity to the query")
    axes[0].set_title(f"tape: frequencies scaled by dim / length (dim {dim})", fontsize=9)
    axes[0].legend(fontsize=7)
    n = 32
    query = n // 2
    pe = seeded(dims=1, kind="erpe", dim=64, heads=1, length=n)
    offsets = torch.arange(-(n - 1), n, dtype=torch.float32)  # table rows: offset i - j = row - (n - 1)
    with torch.no_grad():  # a stand-in for a trained table (the init is 0): favour the 3 keys before the query
        pe.table.copy_(0.05 * ((offsets >= 0) & (offsets <= 3)).float()[:, None])
        term = pe((n,)).prob_bias[0, query]  # (n,)
    uniform = torch.full((n,), 1.0 / n)  # content alike everywhere: the softmax alone is uniform
    colour = kind_colour("erpe")
    axes[1].plot(range(n), uniform.numpy(), ":", color="0.4", label=f"softmax alone (1 / {n})")
    axes[1].plot(range(n), (uniform + term).numpy(), "-o", color=colour, ms=3, label="erpe: softmax + term")
    axes[1].plot(range(n), torch.softmax(term, 0).numpy(), "--", color=colour, alpha=0.6,
                 label="the same term before the softmax")
    axes[1].set(xlabel=f"key position (query at {query})", ylabel="attention weight")
    axes[1].set_title("erpe: 0.05 on offsets 0..3 (stand-in table), after vs before the softmax", fontsize=9)
    axes[1].legend(fontsize=8)
    fig.suptitle("ConvTran's encodings for time series (Foumani et al. 2023)", fontsize=10)
    return fig


def _addition_place_ids() -> tuple[list[str], torch.Tensor]:
    """The tokens of one decoder-only addition (three digits, reversed) and their place ids ``(N, 1)``."""
    tokens = list("321+654=975")  # 123 + 456 = 579, every number least significant digit first
    place = [0.0] * len(tokens)
    for start in (0, 4, 8):  # each number's digits: 1, 2, 3
        place[start:start + 3] = [1.0, 2.0, 3.0]
    return tokens, torch.tensor(place)[:, None]


def _ids_and_similarity(kind: str, draws: list[tuple[str, torch.Tensor]], out: torch.Tensor, tokens: list[str]):
    """Left: the ids each draw gives the tokens; right: the cosine similarity of the tokens' added vectors."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained", gridspec_kw={"width_ratios": [1.4, 1]})
    colour = kind_colour(kind)
    for (label, ids), (ls, marker) in zip(draws, [("-", "o"), ("--", "s"), (":", "^")]):
        axes[0].plot(range(len(tokens)), ids.tolist(), ls, marker=marker, color=colour, label=label)
    axes[0].set_xticks(range(len(tokens)), tokens)
    axes[0].set(xlabel="token (numbers least significant digit first)", ylabel="row of the table")
    axes[0].legend(fontsize=8)
    unit = torch.nn.functional.normalize(out, dim=-1)
    sim = unit @ unit.T
    image = axes[1].imshow(sim.numpy(), **color_scale(sim))
    axes[1].set_xticks(range(len(tokens)), tokens), axes[1].set_yticks(range(len(tokens)), tokens)
    axes[1].set_title("cosine similarity of the tokens' encodings (eval)", fontsize=9)
    fig.colorbar(image, ax=axes[1], shrink=0.8, label=style.colourbar_label("relation", "cosine similarity"))
    return fig


@figure("abacus")
def abacus_place_ids():
    """Abacus: the digits of one place share a row in every number; training shifts every digit by one k."""
    tokens, place = _addition_place_ids()
    pe = seeded(dims=1, kind="abacus", dim=32, size=64, max_k=9)
    ids = place[:, 0].long()
    draws = [("eval (k = 0)", ids), ("training, k = 4", torch.where(ids > 0, ids + 4, ids)),
             ("training, k = 9", torch.where(ids > 0, ids + 9, ids))]
    with torch.no_grad():
        fig = _ids_and_similarity("abacus", draws, pe(positions=place).add, tokens)
    fig.suptitle("abacus: 123 + 456 = 579 (written reversed), the row of each digit is its place; + and = take row 0 "
                 "(table at its seeded init)", fontsize=10)
    return fig


@figure("coupling")
def coupling_ids():
    """Position coupling: digits of equal significance share an id; the operators one past the units; a random
    start per sequence in training."""
    from ndpe.kinds.coupling import coupled_ids

    tokens, place = _addition_place_ids()
    pe = seeded(dims=1, kind="coupling", dim=32, max_position=16)
    ids = place[:, 0].long()
    draws = [("eval (start 1)", coupled_ids(ids, 1)), ("training, start 5", coupled_ids(ids, 5)),
             ("training, start 11", coupled_ids(ids, 11))]
    with torch.no_grad():
        fig = _ids_and_similarity("coupling", draws, pe(positions=place).add, tokens)
    fig.suptitle("coupling: 123 + 456 = 579 (written reversed), one id per significance (start + n + 1 - place), + and = at "
                 "start + n + 1 (table at its seeded init)", fontsize=10)
    return fig
