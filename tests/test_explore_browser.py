"""The explorer page in a real browser: headless Chromium (Debian's package) driven by Selenium with Debian's
chromedriver, the page opened from ``file://`` with every host unresolvable.

scripts/browser.sh (run by scripts/test.sh) installs Chromium where it can (root with apt-get); elsewhere these tests
skip, except under CI (``CI=true``), where a missing browser is a failure.
"""
from __future__ import annotations

import base64
import math
import os
import time
from urllib.parse import parse_qs, quote, urlsplit

import numpy as np
import pytest

import ndpe
from ndpe.explore.browser import chromium, missing

from conftest import page_data

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
        f"return document.querySelectorAll('#{tab} canvas, #{tab} svg').length > 0 || "
        f"!!document.querySelector('#{tab} .error')"))
    if tab == "growth":  # the toy scene is an image: drawn once it has loaded
        wait_for(driver, lambda: driver.execute_script("return document.documentElement.dataset.scene === 'loaded'"))


def wait_for(driver, condition, timeout: float = 10.0) -> None:
    end = time.time() + timeout
    while not condition():
        if time.time() > end:
            raise AssertionError("the page did not draw in time")
        time.sleep(0.05)


def pixels(driver, tab: str) -> list[str]:
    """What the tab draws: every canvas of its panel as a PNG data URL (the scene waits for its image), every SVG
    chart as its markup (with the styles that show or hide its series)."""
    return driver.execute_script(f"return [...document.querySelectorAll('#{tab} canvas')].map(c => c.toDataURL())"
                                 f".concat([...document.querySelectorAll('#{tab} svg')].map(s => s.outerHTML))")


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
                f"return [...document.querySelectorAll('#{tab} canvas, #{tab} svg')].map(c => c.getBoundingClientRect().right)")
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


# --- what the page prints is what Python computed ------------------------------------------------------------

def fmt(x: float | None, d: int = 3) -> str:
    """The page's ``fmt`` written again in Python (the reference the page's text is checked against): ``d``
    significant digits, halves rounded away from zero on the float's exact value (as JavaScript's
    ``toPrecision``), a fraction's trailing zeros dropped, the integer part kept whole, exponents outside
    1e-4 .. 1e6."""
    from decimal import ROUND_HALF_UP, Decimal

    if x is None or not math.isfinite(x):
        return "n/a"
    if x == 0:
        return "0"
    exact, a = Decimal(x), abs(x)
    trim = lambda t: t.rstrip("0").rstrip(".") if "." in t else t  # noqa: E731
    if a < 1e-4 or a >= 1e6:
        e = exact.adjusted()
        m = exact.scaleb(-e).quantize(Decimal(1).scaleb(1 - d), ROUND_HALF_UP)
        if abs(m) >= 10:
            m, e = (m / 10).quantize(Decimal(1).scaleb(1 - d), ROUND_HALF_UP), e + 1
        return f"{trim(format(m, 'f'))}e{'+' if e >= 0 else '-'}{abs(e)}"
    rounded = exact.quantize(Decimal(1).scaleb(min(0, exact.adjusted() - d + 1)), ROUND_HALF_UP)
    return trim(format(rounded, "f"))


FMT_CASES = [  # (x, digits, what the page prints)
    (100, 3, "100"), (120, 3, "120"), (49.5, 2, "50"), (30, 2, "30"), (7, 3, "7"), (1000, 3, "1000"),
    (123456, 3, "123456"), (999.96, 3, "1000"), (0.5, 3, "0.5"), (0.125, 2, "0.13"), (3.14159, 3, "3.14"),
    (2.0, 3, "2"), (-1, 3, "-1"), (-0.05, 2, "-0.05"), (-49.5, 2, "-50"), (-1234.5, 3, "-1235"), (0, 3, "0"),
    (1.5e-7, 3, "1.5e-7"), (0.0001, 3, "0.0001"), (9.99996e-5, 3, "1e-4"), (2e9, 3, "2e+9"), (-3.456e12, 2, "-3.5e+12"),
    (None, 3, "n/a"), (math.nan, 3, "n/a"), (math.inf, 3, "n/a")]


@pytest.mark.parametrize("x,digits,shown", FMT_CASES)
def test_the_formatter_of_the_page(browser, explorer_page, x, digits, shown):
    """The page's ``fmt`` (run in the browser) on integers, decimals, negatives, tiny and huge values; the Python
    reference agrees. The old ``fmt`` printed 100 as "1" and 49.5 (2 digits) as "5"."""
    if browser.execute_script("return typeof fmt") != "function":
        open_tab(browser, explorer_page, "growth")
    # NaN and infinities do not travel as arguments: written as JavaScript literals
    literal = "null" if x is None else "NaN" if math.isnan(x) else "Infinity" if math.isinf(x) else repr(x)
    assert browser.execute_script(f"return fmt({literal}, {digits})") == shown
    assert fmt(x, digits) == shown


def test_the_formatter_agrees_with_python_on_random_values(browser, explorer_page):
    import random

    rng = random.Random(0)
    values = [rng.choice([-1, 1]) * 10 ** rng.uniform(-9, 12) for _ in range(400)]
    values += [rng.randint(-5000, 5000) for _ in range(100)]
    open_tab(browser, explorer_page, "growth")
    for digits in (2, 3):
        shown = browser.execute_script("return arguments[0].map(x => fmt(x, arguments[1]))", values, digits)
        assert shown == [fmt(v, digits) for v in values]


class Held(np.ndarray):
    """An unpacked map and its packing step (``step``), which its slices keep, as the page's ``steps`` keeps a map's
    step for its subarrays; a new array computed from it (a difference) holds none (0)."""

    def __array_finalize__(self, obj):
        self.step = getattr(obj, "step", 0.0)


def _unpack(packed: dict) -> Held:
    """The page's ``unpack``: offset + byte x scale in float64, stored as float32 (NaN for 255)."""
    q = np.frombuffer(base64.b64decode(packed["b64"]), dtype=np.uint8).astype(np.float64)
    out = np.where(q == 255, np.nan, packed["offset"] + q * packed["scale"]).astype(np.float32).view(Held)
    out.step = packed["scale"]
    return out


def held(x: float, step: float) -> str:
    """The page's ``fmtHeld``: ``x`` to the decimals a packing step holds (JavaScript's toFixed: exact value,
    ties away from zero), trailing zeros dropped; ``fmt`` where nothing is packed."""
    from decimal import ROUND_HALF_UP, Decimal

    if not step > 0:
        return fmt(x)
    decimals = max(0, math.floor(-math.log10(step)))
    if decimals > 6:
        return fmt(x, 4)
    text = str(Decimal(float(x)).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP))
    text = text.rstrip("0").rstrip(".") if "." in text else text
    return "0" if text == "-0" else text


def _scale_text(data: dict, quantity: str, *arrays: np.ndarray) -> str:
    """The colour bar's text for ``arrays`` on one scale (the page's ``limits``: the values' range, printed to the
    precision of the coarsest packed map among them)."""
    finite = np.concatenate([a[np.isfinite(a)] for a in arrays]).astype(np.float64)
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (-1.0, 1.0)
    step = max(getattr(a, "step", 0.0) for a in arrays)
    q = data["cmaps"][quantity]
    if hi - lo < 1e-6:
        lo, hi = lo - 0.5, hi + 0.5
    return f"{held(lo, step)} … {held(hi, step)}: {q['label']}" + (f" ({q['unit']})" if q["unit"] else "")


def _texts(driver, selector: str) -> list[str]:
    return driver.execute_script(f"return [...document.querySelectorAll({selector!r})].map(e => e.textContent)")


def _cell(point: dict | None) -> str:
    if point is None:
        return ""
    return fmt(point["mean"]) + (f" [{fmt(point['lo'])}, {fmt(point['hi'])}]" if point["lo"] is not None else "")


@pytest.mark.parametrize("theta,scaling,grow", [("100", "ntk", "2"), ("10000", "yarn", "4"), ("10", "none", "1.5"),
                                                ("1000", "pi", "2")])
def test_dial_texts_are_ndpe_angles(browser, explorer_page, theta, scaling, grow):
    """Each pair's line (turn length, angles seen and met, the unseen share in %) against ndpe's rope, built here
    with the scaling's options."""
    from ndpe.explore.data import DIAL_HEAD_DIM, DIAL_LENGTH, SCALINGS, angle_steps
    from ndpe.scaling import needs_train_shape

    open_tab(browser, explorer_page, "dials", theta=theta, scaling=scaling, grow=grow)
    options = {"theta": float(theta)}
    if SCALINGS[scaling] is not None:
        options.update(scaling=SCALINGS[scaling], scale=float(grow))
        if needs_train_shape(SCALINGS[scaling]):
            options["train_shape"] = (DIAL_LENGTH,)
    w = angle_steps(ndpe.make(dims=1, kind="rope", dim=DIAL_HEAD_DIM, theta=float(theta)))
    w_test = angle_steps(ndpe.make(dims=1, kind="rope", dim=DIAL_HEAD_DIM, **options))
    expected = []
    for j, (a, b) in enumerate(zip(w.tolist(), w_test.tolist())):
        seen, met = a * (DIAL_LENGTH - 1), b * (round(float(grow) * DIAL_LENGTH) - 1)
        out = seen < 2 * math.pi and met > seen
        share = (f": {fmt(min(met, 2 * math.pi) - seen)} rad of the circle never seen (red), "
                 f"{fmt(100 * (met - seen) / seen, 2)} % beyond the largest angle seen") if out else ""
        expected.append(f"pair {j}: one turn per {fmt(2 * math.pi / b)} tokens; angles seen 0–{fmt(seen)} rad, "
                        f"met 0–{fmt(met)} rad{share}")
    assert _texts(browser, "#dials-list li") == expected


def test_numbers_of_every_tab_are_pythons(browser, explorer_page):
    """Colour-scale ends, captions and table cells, for a sample of settings in every tab, against the page's data
    (unpacked and reduced in numpy) and the quick run's explore.json, formatted by the Python ``fmt``."""
    data = page_data(explorer_page.read_text())
    # growth: the scale of both maps, the grown grid, and the benchmark's numbers at this growth
    G = data["growth"]
    for key, q in [("rope|index|none|2|zoom", "edge"), ("rope|index|yarn|3|canvas", "centre"),
                   ("rope|pixel|none|3|canvas", "centre"),
                   ("learned|-|none|1.5|zoom", "corner")]:
        kind, coords, scaling, grow, mode = key.split("|")
        open_tab(browser, explorer_page, "growth", kind=kind, mode=mode, grow=grow, coords=coords, scaling=scaling, q=q)
        d, qi = G["settings"][key], G["queries"].index(q)
        n_train, n_grown = math.prod(G["train"]), math.prod(d["grid"])
        train = _unpack(d["train_rows"])[qi * n_train:(qi + 1) * n_train]
        grown = _unpack(d["rows"])[qi * n_grown:(qi + 1) * n_grown]
        assert _texts(browser, "#growth .scale") == [_scale_text(data, d["quantity"], train, grown)], key
        grown = f"grown {d['grid'][0]} × {d['grid'][1]};"
        assert any(t.startswith(grown) for t in _texts(browser, "#growth figcaption"))
        label = kind + (f" ({scaling})" if scaling != "none" else "")
        rows = []
        for name, task in data["bench"]["tasks"].items():
            if not name.startswith("image/") or (mode == "zoom") != name.endswith("-zoom"):
                continue
            pick = lambda ser: next((p for p in ser["points"] if abs(p["ratio"] - float(grow)) < 1e-9), None)  # noqa: E731
            ser = task["series"].get(label)
            p = pick(ser) if ser else None
            floors = [pick(s)["mean"] for s in task["series"].values() if s["floor"] and pick(s)]
            best = (max if task["higher"] else min)(floors) if floors else None
            cell = (_cell(p) + ("" if ser["counts"] else " ✗ does not count")) if p else "not in this run"
            rows.append(f"{name} ({task['metric']}){cell}{'—' if best is None else fmt(best)}")
        assert _texts(browser, "#growth table.nums tr")[1:] == rows, key
    # compare: each map's scale (one for both where they measure the same quantity), the default query
    C = data["compare"]
    for a, b, dims in [("rope", "learned", "2"), ("alibi", "rope", "1"), ("sinusoidal", "rope", "3")]:
        open_tab(browser, explorer_page, "compare", a=a, b=b, dims=dims)
        grid = C["grids"][dims]
        frames, rows_, cols = ([1, 1] + grid)[-3:]
        n = frames * rows_ * cols
        q = frames // 2 * rows_ * cols + rows_ // 2 * cols + cols // 2
        maps = [C["maps"][f"{k}/{dims}"] for k in (a, b)]
        frame = q // (rows_ * cols)
        vals = [_unpack(m["rows"])[q * n:(q + 1) * n][frame * rows_ * cols:(frame + 1) * rows_ * cols] for m in maps]
        shared = maps[0]["quantity"] == maps[1]["quantity"]
        expected = [_scale_text(data, m["quantity"], *(vals if shared else [v])) for m, v in zip(maps, vals)]
        assert _texts(browser, "#compare .scale") == expected, (a, b, dims)
    # axes: the scale of the three maps and each map's diagonal preference, at three angles and weights
    for alpha, weight in (("0", "0.5"), ("45", "1"), ("90", "0.75")):
        open_tab(browser, explorer_page, "axes", alpha=alpha, weight=weight)
        d = data["axes"]["settings"][alpha]
        keys = ["row", "col", "total" if weight == "0.5" else weight]
        assert _texts(browser, "#axes .scale") == [_scale_text(data, "relation", *(_unpack(d[k]) for k in keys))]
        captions = _texts(browser, "#axes figcaption")
        for caption, k in zip(captions, keys):
            assert f"anti-diagonal: {fmt(d['diagonal'][k], 2)}" in caption, (alpha, caption)
    # spectrogram: the scale of the sound, its shifted copy and their difference; of the long clip
    S, (T, F) = data["spec"], data["spec"]["grid"]
    for time, freq, view in [("rope", "learned", "shift"), ("learned", "sinusoidal", "long")]:
        open_tab(browser, explorer_page, "spec", time=time, freq=freq, view=view, shift="2")
        d, q = S["settings"][f"{time}|{freq}"], T // 2 * F + 2
        rows_ = _unpack(d["rows"]).reshape(T * F, T * F)
        if view == "shift":
            base, moved = rows_[q], rows_[q + 2]
            diff = np.full((T, F), np.nan, dtype=np.float32)
            moved_back = moved.reshape(T, F)[:, 2:].astype(np.float64)
            diff[:, :F - 2] = (moved_back - base.reshape(T, F)[:, :F - 2]).astype(np.float32)
            expected = _scale_text(data, "relation", base, moved, diff.ravel())
        else:
            expected = _scale_text(data, "relation", rows_[q], _unpack(d["long"]).reshape(F, -1)[q % F])
        assert _texts(browser, "#spec .scale") == [expected], (time, freq, view)
    # bias: every head's slope, the shared scale
    B = data["bias"]
    for name in list(B["settings"])[:3]:
        open_tab(browser, explorer_page, "bias", kind=quote(name))
        d = B["settings"][name]
        heads = _unpack(d["heads"])
        caps = [f"head {h}" + (f", slope {fmt(s)}" if d["slopes"] else "")
                for h, s in enumerate(d["slopes"] or [None] * (heads.size // math.prod(B["grid"])))]
        assert _texts(browser, "#bias figcaption") == caps, name
        assert _texts(browser, "#bias .scale") == [_scale_text(data, "bias", heads)], name
    # benchmark: every task's table, every drawn series and every floor at every size
    for name, task in data["bench"]["tasks"].items():
        open_tab(browser, explorer_page, "bench", task=quote(name, safe=""))
        drawn = _texts(browser, "#bench table.nums tr td:first-child")
        for tr in browser.execute_script("return [...document.querySelectorAll('#bench table.nums tr')].slice(1)"
                                         ".map(r => [...r.cells].map(c => c.textContent))"):
            label = tr[0].removesuffix(" ✗")
            points = {p["ratio"]: p for p in task["series"][label]["points"]}
            assert tr[1:] == [_cell(points.get(z["ratio"])) for z in task["sizes"]], (name, label)
        assert len(drawn) == len(set(drawn)) > 0, name



# --- every picture shows its claim ---------------------------------------------------------------------------

def _cell_colour(driver, canvas_id: str, index: int, cols: int) -> str:
    """The ``#rrggbb`` painted at the centre of cell ``index`` of a map canvas."""
    return driver.execute_script(
        "const c = document.getElementById(arguments[0]), cell = c.width / arguments[2];"
        "const [r, g, b] = c.getContext('2d').getImageData((arguments[1] % arguments[2] + 0.5) * cell,"
        " (Math.floor(arguments[1] / arguments[2]) + 0.25) * cell, 1, 1).data;"
        "return '#' + [r, g, b].map(v => v.toString(16).padStart(2, '0')).join('')", canvas_id, index, cols)


def test_colour_scales_span_the_values_drawn(browser, explorer_page):
    """RoPE's relation on the growth tab lies in about 0.3 .. 1: its largest value gets the map's last colour and
    its smallest the white centre (a fixed -1 .. 1 scale painted them in the upper quarter of the colours only).
    ALiBi's penalties (all <= 0) span the lower half, from the darkest blue to white."""
    data = page_data(explorer_page.read_text())
    lut = data["cmaps"]["relation"]["lut"]
    open_tab(browser, explorer_page, "growth", kind="rope", mode="zoom", grow="2", coords="index", scaling="none")
    d = data["growth"]["settings"]["rope|index|none|2|zoom"]
    values = _unpack(d["rows"])[:math.prod(d["grid"])]  # the centre query
    cols = d["grid"][1]
    assert values.min() > 0
    assert _cell_colour(browser, "growth-map", int(values.argmax()), cols) == lut[-1]
    assert _cell_colour(browser, "growth-map", int(values.argmin()), cols) == lut[len(lut) // 2]
    open_tab(browser, explorer_page, "bias", kind=quote("alibi (euclidean)"))
    lut = data["cmaps"]["bias"]["lut"]
    heads = _unpack(data["bias"]["settings"]["alibi (euclidean)"]["heads"]).reshape(-1, 15 * 15)
    h, key = np.unravel_index(int(heads.argmin()), heads.shape)
    assert _cell_colour(browser, f"bias-map-{h}", int(key), 15) == lut[0]


def test_a_link_opens_the_query_frame(browser, explorer_page):
    """The guide's 3D link (query 93: frame 2) opened on a page showing frame 0 shows frame 2 with the query
    marked: a link names its whole setting, nothing of the page's last state stays."""
    open_tab(browser, explorer_page, "compare", dims="3", a="rope", b="learned", frame="0", q="0")
    assert browser.execute_script("return document.getElementById('compare-frame').value") == "0"
    browser.execute_script("location.hash = 'tab=compare&dims=3&a=rope&b=learned&q=93'")
    wait_for(browser, lambda: hash_params(browser).get("q") == "93")
    assert browser.execute_script("return document.getElementById('compare-frame').value") == "2"
    assert browser.find_element("id", "compare-map-a").get_attribute("data-query") == str(93 - 2 * 36)


def test_the_axis_tab_shows_a_diagonal_preferred(browser, explorer_page):
    """At 45 degrees the mean of both groups prefers neither diagonal; a head weighting group 0 alone prefers the
    anti-diagonal by a visible margin. Captions follow the angle: at 90 degrees group 0 is a column term."""
    open_tab(browser, explorer_page, "axes", alpha="45", weight="0.5")
    assert "(no diagonal preferred)" in _texts(browser, "#axes figcaption")[2]
    open_tab(browser, explorer_page, "axes", alpha="45", weight="1")
    caption = _texts(browser, "#axes figcaption")[2]
    assert "(the ↗ anti-diagonal preferred)" in caption
    assert float(caption.split("anti-diagonal: ")[1].split(" ")[0]) < -0.5
    open_tab(browser, explorer_page, "axes", alpha="90")
    group0, group1 = _texts(browser, "#axes figcaption")[:2]
    assert "a column term" in group0 and "row term" not in group0 and "a row term" in group1


@pytest.mark.parametrize("view", ["shift", "long"])
def test_spectrogram_maps_share_one_cell_size_and_name_their_axes(browser, explorer_page, view):
    open_tab(browser, explorer_page, "spec", time="rope", freq="learned", view=view)
    sizes = browser.execute_script(
        "return [...document.querySelectorAll('#spec canvas.map')].map(c => c.getBoundingClientRect().height)")
    assert len(sizes) == (3 if view == "shift" else 2) and max(sizes) - min(sizes) < 0.5
    assert len(_texts(browser, "#spec .xlabel")) == len(sizes) == len(_texts(browser, "#spec .ylabel"))
    captions = " ".join(_texts(browser, "#spec figcaption"))
    assert "time: RoPE (relative), frequency: learned table (absolute)" in captions
    if view == "shift":
        assert "tells the pitches apart" in captions  # a learned table on the frequency axis sees the shift


# --- the benchmark charts: matplotlib's, every label readable ----------------------------------------------------

CHART_TEXTS = """return [...document.querySelectorAll('#bench-plot svg text')]
    .filter(t => t.closest('[style*="display: none"]') === null)
    .map(t => { const b = t.getBoundingClientRect(); return [t.textContent, b.left, b.top, b.right, b.bottom]; })"""


@pytest.mark.parametrize("width", [1280, 390])
def test_chart_labels_neither_overlap_nor_clip(browser, explorer_page, width):
    """Every task's chart at a desktop and a phone width: each text of the chart (ticks, axis labels, legend) lies
    inside the chart and overlaps no other; the x ticks are the task's test sizes. (The hand-drawn canvas piled its
    end-of-line labels on each other and cut its last x label.)"""
    data = page_data(explorer_page.read_text())
    browser.set_window_size(width, 1000)
    try:
        for name, task in data["bench"]["tasks"].items():
            open_tab(browser, explorer_page, "bench", task=quote(name, safe=""))
            box = browser.execute_script("const b = document.querySelector('#bench-plot svg').getBoundingClientRect();"
                                         "return [b.left, b.top, b.right, b.bottom]")
            assert box[2] <= browser.execute_script("return window.innerWidth") + 1, name
            texts = [t for t in browser.execute_script(CHART_TEXTS) if t[0].strip()]
            assert texts, name
            for text, left, top, right, bottom in texts:
                assert box[0] - 1 <= left and right <= box[2] + 1 and box[1] - 1 <= top and bottom <= box[3] + 1, \
                    (name, text, "clipped")
            for i, a in enumerate(texts):
                for b in texts[i + 1:]:
                    overlap = min(a[3], b[3]) - max(a[1], b[1]), min(a[4], b[4]) - max(a[2], b[2])
                    assert min(overlap) <= 0.5, (name, a[0], b[0], "overlap")
            if width == 390:  # readable on a phone: no text drawn smaller than 8 px (7.6 in scaled down: 5-6 px)
                small = [(text, round(bottom - top, 1)) for text, left, top, right, bottom in texts if bottom - top < 8]
                assert not small, (name, small[:4])
            shown = [t[0] for t in texts]
            if len(task["sizes"]) > 1:
                assert all(z["label"] in shown for z in task["sizes"]), name
    finally:
        browser.set_window_size(1280, 1000)


def test_unticked_series_leave_the_chart(browser, explorer_page):
    """A series not ticked is not drawn (its line and bars hidden) and its legend entry is pale; floors stay."""
    data = page_data(explorer_page.read_text())
    open_tab(browser, explorer_page, "bench", task=quote("image/shapes-zoom", safe=""), kinds="rope")
    ids = data["bench"]["charts"]["image/shapes-zoom"]["ids"]
    task = data["bench"]["tasks"]["image/shapes-zoom"]
    state = browser.execute_script(
        "const ids = arguments[0], out = {};"
        "for (const [label, id] of Object.entries(ids)) { const line = document.getElementById(id + '-line'),"
        " text = document.getElementById(id + '-legend-text');"
        " out[label] = [line.style.display !== 'none', text.style.opacity || '1']; } return out", ids)
    for label, (drawn, opacity) in state.items():
        on = label == "rope" or task["series"][label]["floor"]
        assert drawn == on and (opacity == "1") == on, label


def test_choices_a_kind_refuses_are_disabled_with_their_reason(browser, explorer_page):
    """Pixel or centred coordinates under NTK (YaRN, PI), a scaling at growth 1, `none` in the click-a-query view:
    each option is there but disabled, its reason (ndpe's own error) beside it; the others stay enabled."""
    data = page_data(explorer_page.read_text())

    def options(select_id):
        return browser.execute_script("return [...document.getElementById(arguments[0]).options]"
                                      ".map(o => [o.value, o.disabled, o.title || ''])", select_id)

    open_tab(browser, explorer_page, "growth", kind="rope", mode="zoom", grow="2", coords="index", scaling="ntk", q="centre")
    coords = {v: (off, why) for v, off, why in options("growth-coords")}
    for c in ("pixel", "centered"):
        assert coords[c] == (True, data["growth"]["settings"][f"rope|{c}|ntk|2|zoom"]["error"]), c
    assert coords["index"] == (False, "")
    grows = {v: off for v, off, _ in options("growth-grow")}
    assert grows["1"] and not grows["2"]
    open_tab(browser, explorer_page, "growth", kind="rope", mode="zoom", grow="2", coords="pixel", scaling="none", q="centre")
    assert [v for v, off, _ in options("growth-scaling") if off] == ["pi", "ntk", "yarn"]
    open_tab(browser, explorer_page, "dials", theta="100", scaling="none", grow="1")
    assert [v for v, off, _ in options("dials-scaling") if off] == ["pi", "ntk", "yarn"]
    open_tab(browser, explorer_page, "compare", dims="2", a="rope", b="learned")
    assert [v for v, off, _ in options("compare-a") if off] == ["none"]
    open_tab(browser, explorer_page, "spec", time="none", freq="rope", view="shift", shift="2")
    assert [v for v, off, _ in options("spec-freq") if off] == ["none"]
