"""The explorer page in a real browser: headless Chromium (Debian's package) driven by Selenium with Debian's
chromedriver, the page opened from ``file://`` with every host unresolvable.

scripts/browser.sh (run by scripts/test.sh) installs Chromium where it can (root with apt-get); elsewhere these tests
skip, except under CI (``CI=true``), where a missing browser is a failure.
"""
from __future__ import annotations

import os
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from ndpe.explore.browser import chromium, missing

pytestmark = pytest.mark.xdist_group("explore")  # the page fixture is built once per process (tests/conftest.py)

TABS = ("growth", "dials", "compare", "axes", "spec", "bias", "bench")


@pytest.fixture(scope="module")
def browser():
    reason = missing()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the browser tests: {reason}")
        pytest.skip(reason)
    with chromium(1280, 1000) as driver:
        yield driver


def open_tab(driver, page, tab: str, **params: str) -> None:
    query = "&".join(f"{k}={v}" for k, v in {"tab": tab, **params}.items())
    driver.get("about:blank")  # a new hash alone would keep the page and its state: load it afresh
    driver.get(f"file://{page}#{query}")
    wait_for(driver, lambda: driver.execute_script(
        f"return document.querySelectorAll('#{tab} canvas').length > 0 || !!document.querySelector('#{tab} .error')"))
    if tab == "growth":  # the toy scene is an image: drawn once it has loaded
        wait_for(driver, lambda: driver.execute_script("return document.documentElement.dataset.scene === 'loaded'"))


def wait_for(driver, condition, timeout: float = 10.0) -> None:
    end = time.time() + timeout
    while not condition():
        if time.time() > end:
            raise AssertionError("the page did not draw in time")
        time.sleep(0.05)


def pixels(driver, tab: str) -> list[str]:
    """What the tab draws: every canvas of its panel as a PNG data URL (the scene waits for its image)."""
    return driver.execute_script(f"return [...document.querySelectorAll('#{tab} canvas')].map(c => c.toDataURL())")


def hash_params(driver) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(driver.current_url).fragment).items()}


def console_errors(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


def test_every_tab_loads_from_file_without_errors(browser, explorer_page):
    for tab in TABS:
        open_tab(browser, explorer_page, tab)
        assert browser.execute_script(f"return !document.getElementById('{tab}').hidden")
        assert pixels(browser, tab), tab
        assert console_errors(browser) == [], tab
        fetched = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        assert [u for u in fetched if not u.startswith("data:")] == [], tab  # nothing but the page itself


def _controls(driver, tab: str) -> list[str]:
    return driver.execute_script(
        f"return [...document.querySelectorAll('#{tab}-controls select, #{tab}-controls input[type=range]')]"
        ".filter(e => !e.disabled).map(e => e.id)")


def _choices(driver, control: str) -> list[str]:
    return driver.execute_script(
        f"const e = document.getElementById('{control}'); return e.tagName === 'SELECT' ? "
        "[...e.options].map(o => o.value) : [...Array(Number(e.max) - Number(e.min) + 1).keys()].map(String)")


def _set(driver, control: str, value: str) -> None:
    driver.execute_script(
        f"const e = document.getElementById('{control}'); e.value = '{value}'; "
        "e.dispatchEvent(new Event(e.tagName === 'SELECT' ? 'change' : 'input'))")


DEFAULTS = {"growth": {}, "dials": {}, "compare": {}, "axes": {}, "spec": {"view": "shift"}, "bias": {},
            "bench": {"task": "image/shapes-zoom"}}


@pytest.mark.parametrize("tab", TABS)
def test_each_control_changes_what_is_drawn(browser, explorer_page, tab):
    """Every enabled control of every tab, set in turn to each of (up to 4 of) its other values, changes the
    canvases' pixels at every step."""
    open_tab(browser, explorer_page, tab, **DEFAULTS[tab])
    controls = _controls(browser, tab)
    assert controls, tab
    for control in controls:
        open_tab(browser, explorer_page, tab, **DEFAULTS[tab])
        if control not in _controls(browser, tab):
            continue
        for value in _choices(browser, control)[:5]:
            if value == browser.execute_script(f"return document.getElementById('{control}').value"):
                continue
            drawn = pixels(browser, tab)
            _set(browser, control, value)
            assert pixels(browser, tab) != drawn, f"{control} = {value} drew the same picture"
    assert console_errors(browser) == []


def test_bench_checkboxes_change_the_plot(browser, explorer_page):
    open_tab(browser, explorer_page, "bench", task="image/shapes-zoom")
    drawn = pixels(browser, "bench")
    browser.execute_script("document.querySelector('#bench-controls input[type=checkbox]').click()")
    assert pixels(browser, "bench") != drawn
    assert "kinds" in hash_params(browser)


def test_clicking_a_cell_moves_the_query(browser, explorer_page):
    from selenium.webdriver.common.action_chains import ActionChains

    open_tab(browser, explorer_page, "compare", dims="2", a="learned", b="rope")
    drawn = pixels(browser, "compare")
    a = browser.find_element("id", "compare-map-a")
    cell = a.size["width"] / 8
    ActionChains(browser).move_to_element_with_offset(a, -a.size["width"] / 2 + 1.5 * cell,
                                                      -a.size["height"] / 2 + 2.5 * cell).click().perform()
    assert hash_params(browser)["q"] == str(2 * 8 + 1)  # row 2, column 1
    for side in "ab":
        assert browser.find_element("id", f"compare-map-{side}").get_attribute("data-query") == str(2 * 8 + 1)
    after = pixels(browser, "compare")
    assert after[0] != drawn[0]  # learned (absolute): the map itself changes
    # rope (relative): the same picture shifted; the query's marker moved either way
    assert after != drawn


def test_the_keyboard_alone_operates_it(browser, explorer_page):
    """Tab to the tab list, arrow to another view, tab to a control and change it, tab to a map and move its query
    with the arrow keys: no mouse."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    open_tab(browser, explorer_page, "growth")
    keys = ActionChains(browser)
    active = lambda: browser.execute_script("return document.activeElement.id")  # noqa: E731
    keys.send_keys(Keys.TAB).perform()
    assert active() == "tab-growth"
    keys.send_keys(Keys.ARROW_RIGHT).perform()
    keys.send_keys(Keys.ARROW_RIGHT).perform()
    assert hash_params(browser)["tab"] == "compare" and active() == "tab-compare"
    for _ in range(10):  # to the first map, through the controls
        ActionChains(browser).send_keys(Keys.TAB).perform()
        if active() == "compare-dims":
            ActionChains(browser).send_keys(Keys.ARROW_DOWN).perform()
            assert hash_params(browser)["dims"] == "3"
        if active() == "compare-map-a":
            break
    assert active() == "compare-map-a"
    start = browser.find_element("id", "compare-map-a").get_attribute("data-query")
    ActionChains(browser).send_keys(Keys.ARROW_LEFT).perform()
    ActionChains(browser).send_keys(Keys.ARROW_UP).perform()
    moved = browser.find_element("id", "compare-map-a").get_attribute("data-query")
    assert int(moved) == int(start) - 1 - 6  # one column left, one row up on the 6-wide 3D frame
    assert active() == "compare-map-a"  # focus stays on the map after it redraws


def test_it_renders_at_a_phone_width(browser, explorer_page):
    browser.set_window_size(390, 844)
    try:
        for tab in TABS:
            open_tab(browser, explorer_page, tab)
            width = browser.execute_script("return window.innerWidth")
            wide = browser.execute_script(  # what sticks out, named in the failure
                f"return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > {width} + 1)"
                ".map(e => `${e.tagName}#${e.id}.${e.className} ${Math.round(e.getBoundingClientRect().right)}px "
                "${(e.textContent || '').slice(0, 40)}`)")
            assert browser.execute_script("return document.documentElement.scrollWidth") <= width + 1, (tab, wide)
            widths = browser.execute_script(
                f"return [...document.querySelectorAll('#{tab} canvas')].map(c => c.getBoundingClientRect().right)")
            assert widths and max(widths) <= width + 1, tab
        assert console_errors(browser) == []
    finally:
        browser.set_window_size(1280, 1000)


def test_a_long_results_path_wraps_at_a_phone_width(browser, explorer_page):
    """The caption names the command that built the page, with its --results path: one long unbroken word in a
    copy of the repository deep under /tmp; it wraps instead of widening the page."""
    browser.set_window_size(390, 844)
    try:
        open_tab(browser, explorer_page, "growth")
        browser.execute_script("document.getElementById('made-by').textContent = "
                               "'ndpe explore --results /' + 'deep/'.repeat(40) + 'benchmarks/results/quick'")
        width = browser.execute_script("return window.innerWidth")
        assert browser.execute_script("return document.documentElement.scrollWidth") <= width + 1
    finally:
        browser.set_window_size(1280, 1000)
