"""The docs site (``mkdocs.yml``) builds with warnings as errors, and its API page shows every public name of ndpe
with its docstring: ``ndpe.__all__`` and the ``__all__`` of each module the page documents (``docs/api.md``), with
the methods and properties of their classes. The site's explorer is the real page (the committed quick record's),
and exercise links of the built guide open their setting in a browser (skipped without one, failed under CI)."""
from __future__ import annotations

import html
import importlib
import inspect
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ndpe

pytestmark = pytest.mark.xdist_group("explore")  # one worker builds the site once, with the explorer tests' page

ROOT = Path(__file__).resolve().parents[1]
MODULES = re.findall(r"^::: ([\w.]+)$", (ROOT / "docs" / "api.md").read_text(), re.M)
PAGES = {"index.html": "README.md", "guide/index.html": "docs/guide.md", "integrations/index.html": "docs/integrations.md",
         "reference/index.html": "docs/reference.md", "benchmarks/index.html": "benchmarks/README.md"}


def overrides_foreign(cls: type, attr: str) -> bool:
    """``attr`` overrides a method of a base class from outside ndpe (``extra_repr`` of ``torch.nn.Module``): that
    base documents it. ``forward`` is the exception: it is where each module's call is described."""
    return attr != "forward" and any(attr in vars(base) for base in cls.__mro__[1:]
                                     if not base.__module__.startswith("ndpe"))


def public_names() -> dict[str, object]:
    """Full name -> object: each documented module's ``__all__``, and its classes' own public methods and properties."""
    names: dict[str, object] = {}
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        assert hasattr(module, "__all__"), f"{module_name} is documented in docs/api.md: it declares its public names"
        for name in module.__all__:
            obj = getattr(module, name)
            names[f"{module_name}.{name}"] = obj
            if inspect.isclass(obj):
                for attr, value in vars(obj).items():
                    if attr.startswith("_") or overrides_foreign(obj, attr):
                        continue
                    if isinstance(value, (property, staticmethod, classmethod)) or inspect.isfunction(value):
                        names[f"{module_name}.{name}.{attr}"] = value
    return names


def docstring(obj: object) -> str | None:
    """``obj``'s own docstring (not one inherited from a base class, nor a dataclass's generated signature); None
    for a value (a constant), whose docstring only the source holds."""
    if isinstance(obj, property):
        return obj.__doc__ or ""
    obj = getattr(obj, "__func__", obj)  # staticmethod, classmethod
    if inspect.isclass(obj):
        doc = vars(obj).get("__doc__") or ""
        return "" if doc.startswith(f"{obj.__name__}(") else doc
    if inspect.isfunction(obj) or inspect.ismodule(obj):
        return obj.__doc__ or ""
    return None


def words(text: str) -> list[str]:
    """The words of ``text`` with reST roles as the site shows them (``:class:`~a.B``` -> ``B``)."""
    text = re.sub(r":\w+:`(~?)([\w.]+)`", lambda m: m[2].rsplit(".", 1)[-1] if m[1] else m[2], text)
    return re.findall(r"\w+", text)


@pytest.fixture(scope="module")
def site(tmp_path_factory, explorer_page) -> Path:
    """The site, its explorer the page ``ndpe explore --results benchmarks/results/quick`` made for the explorer
    tests (tests/conftest.py): the hook reads it from $NDPE_EXPLORER_PAGE instead of making it again."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "NDPE_EXPLORER_PAGE": str(explorer_page)},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    return out


@pytest.fixture(scope="module")
def api_sections(site) -> dict[str, str]:
    """Each object's anchor on the API page -> the words of its section (heading, signature, docstring)."""
    page = (site / "api" / "index.html").read_text()
    heads = list(re.finditer(r'<h[2-6] id="([^"]+)" class="doc doc-heading"', page))
    ends = [h.start() for h in heads[1:]] + [len(page)]
    return {h[1]: " ".join(re.findall(r"\w+", html.unescape(re.sub(r"<[^>]+>", " ", page[h.start():end]))))
            for h, end in zip(heads, ends)}


def test_the_api_page_documents_the_modules_users_import():
    assert {"ndpe", "ndpe.timm", "ndpe.hf", "ndpe.flex"} <= set(MODULES), MODULES


def test_every_public_name_has_a_docstring():
    missing = sorted(name for name, obj in public_names().items() if docstring(obj) == "")
    assert not missing, f"public names without a docstring of their own: {missing}"


def test_the_site_has_the_readme_the_guide_the_recipes_and_the_benchmark(site):
    for page, source in PAGES.items():
        title = re.search(r"^# (.+)$", (ROOT / source).read_text(), re.M)[1]
        shown = " ".join(re.findall(r"\w+", html.unescape((site / page).read_text())))
        assert " ".join(words(title)) in shown, f"{page} does not show {source} (its title {title!r})"


def test_every_public_name_is_on_the_api_page_with_its_docstring(api_sections):
    absent, undocumented = [], []
    for name, obj in public_names().items():
        section = api_sections.get(name)
        if section is None:
            absent.append(name)
            continue
        doc = docstring(obj)
        summary = " ".join(words(doc.strip().splitlines()[0])[:6]) if doc else ""
        if summary not in section or len(section.split()) <= len(name.split(".")[-1].split("_")):
            undocumented.append(name)
    assert not absent, f"public names missing from the API page (no docstring?): {absent}"
    assert not undocumented, f"public names on the API page without their docstring: {undocumented}"


# An exercise link of the guide -> the controls the explorer must show for it (select id -> value).
EXERCISE_LINKS = {
    "#tab=growth&kind=rope&mode=zoom&grow=2&coords=pixel&scaling=none&q=centre":
        {"growth-kind": "rope", "growth-mode": "zoom", "growth-grow": "2", "growth-coords": "pixel",
         "growth-scaling": "none", "growth-query": "centre"},
    "#tab=dials&theta=10000&scaling=none&grow=1": {"dials-theta": "10000", "dials-scaling": "none", "dials-grow": "1"},
    "#tab=spec&time=rope&freq=learned&view=shift&shift=2":
        {"spec-time": "rope", "spec-freq": "learned", "spec-compare": "shift", "spec-shift": "2"},
}


def test_the_api_page_lists_every_kinds_options_and_call_arguments(site):
    """The API page's kinds table: a row per registered kind with its options, and the camera kinds' own call
    arguments (extrinsics, intrinsics) beside them."""
    from ndpe.cli import call_arguments

    page = (site / "api" / "index.html").read_text()
    text = lambda cell: html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()  # noqa: E731
    rows = {text(cells[0]): [text(c) for c in cells[1:]]
            for cells in (re.findall(r"<td>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", page, re.S))
            if cells}
    assert "Every kind's call: pe(grid_shape, *, positions=None, num_prefix=0, dtype=None, past=0)" in text(page)
    for kind in ndpe.available():
        assert kind in rows, f"the API page's kinds table has no row for {kind}"
        _, opts, own = rows[kind]
        assert all(option in opts for option in ndpe.options(kind)), (kind, opts)
        assert [n for n in own.split(":")[0].split(", ") if n != "—"] == list(call_arguments(kind)), (kind, own)
    assert list(call_arguments("prope")) == ["extrinsics", "intrinsics"]


def test_the_site_has_the_real_explorer_and_the_answers(site):
    from conftest import page_data

    page = (site / "explorer" / "index.html").read_text()
    data = page_data(page)
    assert set(data["kinds"]) == set(ndpe.available()) and data["bench"]["tasks"], "not the full page of the record"
    assert data["meta"]["command"].endswith("benchmarks/results/quick")
    guide = (site / "guide" / "index.html").read_text()
    assert guide.count('<details class="note">') >= 23, "the exercises' answers are not folded on the guide page"


def test_exercise_links_of_the_built_guide_open_their_setting(site):
    from ndpe.explore.browser import chromium, missing

    reason = missing()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the browser tests: {reason}")
        pytest.skip(reason)
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    # served as a host would serve it: the site's links are directory URLs (../explorer/#...)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with chromium(1280, 1000, local=True) as driver:
            _open_exercise_links(driver, root)
    finally:
        server.shutdown()


def _open_exercise_links(driver, root: str) -> None:
    """Click each of :data:`EXERCISE_LINKS` on the guide's page; the explorer shows its tab with those controls."""
    for fragment, controls in EXERCISE_LINKS.items():
        driver.get(f"{root}/guide/")
        link = driver.execute_script("return [...document.querySelectorAll('a')].find(a => a.getAttribute('href')"
                                     ".endsWith('explorer/' + arguments[0]))", fragment)
        assert link is not None, f"the guide has no link to {fragment}"
        driver.execute_script("arguments[0].click()", link)
        tab = fragment.split("&")[0].removeprefix("#tab=")
        end = time.time() + 20
        while not driver.execute_script(f"return !!document.querySelector('#{tab}-controls select')"):
            assert time.time() < end, f"{fragment}: the explorer did not draw"
            time.sleep(0.1)
        url, _, shown_fragment = driver.current_url.partition("#")
        link_params = dict(kv.split("=") for kv in fragment[1:].split("&"))
        assert url == f"{root}/explorer/" and link_params.items() <= dict(
            kv.split("=") for kv in shown_fragment.split("&")).items(), (fragment, shown_fragment)  # the page may add
        assert driver.execute_script(f"return !document.getElementById('{tab}').hidden"), fragment
        shown = {k: driver.execute_script("return document.getElementById(arguments[0]).value", k) for k in controls}
        assert shown == controls, fragment
        assert not driver.execute_script(f"return !!document.querySelector('#{tab} .error')"), fragment
