"""Headless Chromium for the explorer's browser tests and the README's screenshot (``docs/explorer_screenshot.py``).

Debian's ``chromium`` and ``chromedriver`` driven by Selenium (``pip install selenium``; the test extra pins it):
Playwright's own browser download needs a network this project's machines do not have. The page needs none:
every host is made unresolvable, so a request the page made would fail and show in the console log (but for
127.0.0.1 where a test serves a built site from it: ``local=True``).
"""
from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from typing import Any, Iterator

FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
NO_HOSTS = "MAP * ~NOTFOUND"


def missing() -> str | None:
    """Why no browser can start here (None when one can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: pip install selenium (the test extra pins it)"
    if shutil.which("chromium") is None or shutil.which("chromedriver") is None:
        return "no chromium / chromedriver on PATH (Debian: apt-get install chromium chromium-driver)"
    return None


@contextmanager
def chromium(width: int = 1280, height: int = 1000, local: bool = False) -> Iterator[Any]:
    """A Selenium driver of headless Chromium with a fresh profile and the browser's console log kept; no host
    resolves (``local``: but 127.0.0.1)."""
    reason = missing()
    if reason is not None:
        raise RuntimeError(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    with tempfile.TemporaryDirectory() as profile:
        hosts = NO_HOSTS + (", EXCLUDE 127.0.0.1" if local else "")
        for flag in (*FLAGS, f"--host-resolver-rules={hosts}", f"--user-data-dir={profile}", f"--window-size={width},{height}"):
            options.add_argument(flag)
        options.binary_location = str(shutil.which("chromium"))
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service(str(shutil.which("chromedriver"))), options=options)
        try:
            yield driver
        finally:
            driver.quit()
