"""Every module in this package defines one kind and registers it; all are imported here.

Adding a kind = adding one file here (and one test file); nothing else to edit. The kind's class says what the
rest of the project needs (docs/guide.md, "Adding a kind"): ``description`` (the README table's "what it is"),
``colour`` and ``marker`` (figures; derived from the name when left out), ``example_options`` (a small example's
required options), ``causal_options`` / ``task_options`` (its options on a benchmark task), ``causal_only`` /
``position_free``, and ``score_bias`` for flex attention. ``ndpe kinds --markdown`` then prints the README's kinds
table with its row.
"""
import importlib
import pkgutil

for _mod in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_mod.name}")
