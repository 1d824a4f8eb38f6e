"""Regenerate every figure of docs/guide.md into docs/figures/ (deterministic: seeds fixed).

    python docs/make_figures.py                 # all figures
    python docs/make_figures.py rope_scaling    # only the ones whose name contains a word

Untrained learned parameters (learned tables, relative biases, RoPE-Mixed frequencies) are shown
at their seeded initialisation; each figure says so. Kinds not registered are skipped with a note.

Every map uses its quantity's colour map and one scale per figure wherever panels are compared
(``ndpe.viz.style``: relations and biases red-blue around 0, encoding values purple-orange); the
variants of one kind (RoPE's scalings) take the palette ``style.VARIANT_COLOURS``. The figures live in
docs/figures_rope.py, docs/figures_other.py, docs/figures_sphere.py and docs/figures_compare.py, registered by ``@figure`` (docs/figure_registry.py).
"""
from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")
import ndpe  # noqa: E402
from ndpe.viz import save  # noqa: E402

import figures_other  # noqa: E402,F401  (registers its figures)
import figures_rope  # noqa: E402,F401  (registers its figures)
import figures_sphere  # noqa: E402,F401  (registers its figures)
from figure_registry import FIGURES, OUT  # noqa: E402


def main(words: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    registered = ndpe.available()
    for name, (build, kinds) in FIGURES.items():
        if words and not any(w in name for w in words):
            continue
        missing = [k for k in kinds if k not in registered]
        if missing:
            print(f"skip {name}: kind(s) {missing} not registered")
            continue
        path = save(build(), OUT / f"{name}.png")
        print(f"{path}  {path.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main(sys.argv[1:])
