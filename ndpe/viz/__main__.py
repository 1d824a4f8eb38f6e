"""``python -m ndpe.viz``: ``ndpe viz`` under another name (:mod:`ndpe.cli`)."""
from ndpe.cli import viz_alias

raise SystemExit(viz_alias(prog="python -m ndpe.viz"))
