"""The pictures of the explorer in the docs: build the page, open it in headless Chromium, save two views.

    python docs/explorer_screenshot.py    # docs/figures/explorer.png (growth view), explorer_bench.png (a chart)

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
CHART = "tab=bench&task=text%2Fstdlib_lm&kinds=alibi,fire,relative,rope,rope%20(ntk),rope%20(pi),rope%20(yarn)"


def wait_for(driver, script: str, what: str) -> None:
    end = time.time() + 20
    while not driver.execute_script(script):
        if time.time() > end:
            raise RuntimeError(f"the explorer did not draw {what} in 20 s")
        time.sleep(0.05)


def main(out: Path = ROOT / "docs" / "figures") -> list[Path]:
    os.chdir(ROOT)  # the page names the run as given: benchmarks/results/standard-v1
    with tempfile.TemporaryDirectory() as tmp:
        page = write_page(Path(tmp), results=Path("benchmarks/results/standard-v1"))
        with chromium(1100, 900) as driver:
            driver.get(f"file://{page}#{VIEW}")
            wait_for(driver, "return document.documentElement.dataset.scene === 'loaded'", "its scene")
            driver.save_screenshot(str(out / "explorer.png"))
            driver.set_window_size(1100, 2400)  # the whole chart in the window: an element's picture is cut to it
            driver.get("about:blank")
            driver.get(f"file://{page}#{CHART}")
            wait_for(driver, "return !!document.querySelector('#bench-plot svg')", "the benchmark chart")
            driver.find_element("id", "bench-plot").screenshot(str(out / "explorer_bench.png"))
    paths = [out / "explorer.png", out / "explorer_bench.png"]
    print(*paths, sep="\n")
    return paths


if __name__ == "__main__":
    main()
