"""The docs site (``mkdocs.yml``) builds with warnings as errors, and its API page shows every public name of ndpe
with its docstring: ``ndpe.__all__`` and the ``__all__`` of each module the page documents (``docs/api.md``), with
the methods and properties of their classes."""
from __future__ import annotations

import html
import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("docs_site")  # one worker builds the site once

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
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True, timeout=600)
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
