"""Check the newest peers installed (``--no-deps``) in FOLDER against the venv that runs this script: each one's
requirements met by the venv's packages, and where it stands against pyproject's bounds for ndpe's extras. Prints
one line per peer; exits 1 naming any requirement the venv does not meet.

    python scripts/peers_check.py FOLDER transformers timm
"""
from __future__ import annotations

import importlib.metadata as md
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version


def bounds(name: str) -> str:
    """The specifier of ``name`` in pyproject's optional dependencies (the hf / timm extras), '' if none."""
    extras = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    for reqs in extras["optional-dependencies"].values():
        for req in map(Requirement, reqs):
            if req.name == name and str(req.specifier) and not any(s.operator == "==" for s in req.specifier):
                return str(req.specifier)
    return ""


def unmet(dist: md.Distribution) -> list[str]:
    """The requirements of ``dist`` (no extras) that the running interpreter's packages do not meet."""
    missing = []
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            missing.append(f"{req} (not installed)")
            continue
        if not req.specifier.contains(have, prereleases=True):
            missing.append(f"{req} (venv has {have})")
    return missing


def main() -> int:
    folder, names = sys.argv[1], sys.argv[2:]
    failed = False
    for name in names:
        dist = next(md.distributions(name=name, path=[folder]), None)
        if dist is None:
            print(f"{name}: not installed in {folder}")
            failed = True
            continue
        missing = unmet(dist)
        spec = bounds(name)
        inside = Requirement(f"{name}{spec}").specifier.contains(Version(dist.version), prereleases=True)
        within = f" ({'within' if inside else 'PAST'} pyproject's {name}{spec})" if spec else ""
        pinned = md.version(name)
        print(f"{name} {dist.version}: newest pip resolves; pinned {pinned}{within}"
              + (f"; venv does not meet {', '.join(missing)}" if missing else ""))
        failed |= bool(missing)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
