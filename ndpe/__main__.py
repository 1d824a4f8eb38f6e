"""``python -m ndpe``: the ``ndpe`` command (:mod:`ndpe.cli`)."""
from ndpe.cli import main

raise SystemExit(main())
