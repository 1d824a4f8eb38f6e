"""The README's picture of the explorer: build the page, open it in headless Chromium, save one view.

    python docs/explorer_screenshot.py            # docs/figures/explorer.png

Needs the viz extra (the page) and a browser (ndpe/explore/browser.py: selenium with Debian's chromium).
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from ndpe.explore import write_page
from ndpe.explore.browser import chromium

ROOT = Path(__file__).resolve().parent.parent
VIEW = "tab=growth&kind=rope&mode=zoom&grow=2&coords=index&scaling=none&q=centre"


def main(out: Path = ROOT / "docs" / "figures" / "explorer.png") -> Path:
    os.chdir(ROOT)  # the page names the run as given: benchmarks/results/standard-v1
    with tempfile.TemporaryDirectory() as tmp:
        page = write_page(Path(tmp), results=Path("benchmarks/results/standard-v1"))
        with chromium(1100, 900) as driver:
            driver.get(f"file://{page}#{VIEW}")
            end = time.time() + 20
            while driver.execute_script("return document.documentElement.dataset.scene") != "loaded":
                if time.time() > end:
                    raise RuntimeError("the explorer did not draw its scene in 20 s")
                time.sleep(0.05)
            driver.save_screenshot(str(out))
    print(out)
    return out


if __name__ == "__main__":
    main()
