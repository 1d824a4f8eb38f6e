"""The docs site's two hooks (``mkdocs.yml``): repository pages outside ``docs/``, and docstrings as Markdown.

``mkdocs build`` reads ``docs/``; the README (the home page) and the benchmark's pages live elsewhere. ``on_files``
adds them, read from where they are (no copies), at their repository paths (the README as ``index.md``), and
``on_page_markdown`` turns a repository-relative link (``../docs/bias.md`` in ``benchmarks/README.md``) into one
between site pages. ``guide.md``'s exercises link to the explorer page, ``explorer/index.html``: ``on_files``
generates it (``ndpe explore --results benchmarks/results/quick``: every tab, the benchmark tab from the committed
quick record), so the site's explorer is the real one and every exercise link opens its setting; a page at
``docs/explorer/index.html`` (``ndpe explore --out docs/explorer``) is replaced by it.

:class:`Docstrings` is a griffe extension (mkdocstrings loads it): ndpe's docstrings are written for ``help()``
and doctest, in reST's inline markup; it turns ``>>>`` examples into ``pycon`` code blocks, ``text::`` literal
blocks into code blocks, and ``:func:`~ndpe.make``` roles into links to the API page (plain code where the
target is not documented there).
"""
from __future__ import annotations

import os
import posixpath
import re
import tempfile
from pathlib import Path

import griffe
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = {"README.md": "index.md", "benchmarks/README.md": "benchmarks/README.md"}  # repository path -> site path
OUTSIDE_GLOBS = ("benchmarks/results/*/report.md", "benchmarks/results/*/*.png")  # what the benchmark pages link to
EXPLORER, EXPLORER_RESULTS = "explorer/index.html", ROOT / "benchmarks" / "results" / "quick"


def site_path(repo_path: str) -> str:
    """Where a repository file lives in the site: ``docs/X`` at ``X``, an added page at its ``OUTSIDE`` path."""
    return repo_path.removeprefix("docs/") if repo_path.startswith("docs/") else OUTSIDE.get(repo_path, repo_path)


REPO_PATHS: dict[str, str] = {}  # site path -> repository path of each page added by on_files


def on_files(files: Files, config) -> Files:
    outside = dict(OUTSIDE)
    outside.update({str(p.relative_to(ROOT)): str(p.relative_to(ROOT)) for g in OUTSIDE_GLOBS for p in ROOT.glob(g)})
    REPO_PATHS.clear()
    for repo_path, site in sorted(outside.items()):
        files.append(File.generated(config, site, abs_src_path=str(ROOT / repo_path)))
        REPO_PATHS[site] = repo_path
    stale = files.get_file_from_path(EXPLORER)
    if stale is not None:
        files.remove(stale)
    files.append(File.generated(config, EXPLORER, content=explorer_page()))
    return files


def explorer_page() -> str:
    """The explorer, every kind, its benchmark tab from the committed quick record: ``ndpe explore --results
    benchmarks/results/quick``'s page, made here (about 10 s of CPU), or read from ``$NDPE_EXPLORER_PAGE`` where a
    caller has just made that page (the tests, which make it once for all their explorer tests)."""
    from ndpe.explore import write_page

    made = os.environ.get("NDPE_EXPLORER_PAGE")
    if made:
        return Path(made).read_text()
    with tempfile.TemporaryDirectory() as out:
        return write_page(Path(out), results=EXPLORER_RESULTS).read_text()


LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?\)")


KINDS_REFERENCE = "<!-- ndpe kinds reference -->"  # in api.md: replaced by every kind's options and call arguments


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    """Links between repository files, rewritten as links between their site pages; the API page's kinds table."""
    if KINDS_REFERENCE in markdown:
        from ndpe.cli import kinds_reference

        markdown = markdown.replace(KINDS_REFERENCE, kinds_reference())
    src = page.file.src_uri
    repo_path = REPO_PATHS.get(src, f"docs/{src}")

    def relink(m: re.Match) -> str:
        target = m[2]
        if "://" in target or target.startswith(("/", "mailto:")):
            return m[0]
        repo_target = posixpath.normpath(posixpath.join(posixpath.dirname(repo_path), target))
        new = posixpath.relpath(site_path(repo_target), posixpath.dirname(src) or ".")
        return f"{m[1]}{new}{m[3] or ''})"

    return LINK.sub(relink, markdown)


ROLE = re.compile(r":(?:class|func|meth|mod|data|attr):`(~?)([\w.]+)`")
DOCTEST = re.compile(r"((?:^>>> .*\n?|^>>>\n?)(?:^(?!\s*$).*\n?)*)", re.M)  # a >>> line and the lines up to a blank one
LITERAL = re.compile(r"::\n\n((?:(?: {4}.*)?\n)+)")
FIELDS = re.compile(r"^(\S[^\n]*:)\n((?: {4,}\S[^\n]*\n?)+)", re.M)  # "Shapes:" then indented "name: what" lines
SECTION = re.compile(r"(Args|Arguments|Parameters|Other Parameters|Keyword Args|Raises|Warns|Returns|Yields|Receives|"
                     r"Examples?|Notes?|Attributes|Functions|Classes|Modules|Methods|References|Deprecated)\s*:")


class Docstrings(griffe.Extension):
    """reST inline markup and doctest examples of ndpe's docstrings, as Markdown for mkdocstrings."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = self.markdown(obj.docstring.value, obj)

    @staticmethod
    def markdown(text: str, obj: griffe.Object) -> str:
        def role(m: re.Match) -> str:
            name = m[2].lstrip(".")
            try:
                target = obj.resolve(name) if "." not in name else name
            except griffe.NameResolutionError:  # a name griffe cannot place: left as written
                target = name
            shown = name.rsplit(".", 1)[-1] if m[1] else name
            return f'<autoref identifier="{target}" optional><code>{shown}</code></autoref>'

        text = FIELDS.sub(Docstrings.field_list, text + "\n")  # first: a code block's lines may end with ":"
        text = LITERAL.sub(lambda m: ":\n\n```text\n" + re.sub(r"^ {4}", "", m[1].rstrip("\n"), flags=re.M) + "\n```\n\n",
                           text).rstrip("\n")
        text = DOCTEST.sub(lambda m: "```pycon\n" + m[1].rstrip("\n") + "\n```\n", text)
        return ROLE.sub(role, text)

    @staticmethod
    def field_list(m: re.Match) -> str:
        """An indented ``name: what`` block under a line that ends with ``:`` (not a Google section: griffe parses
        those) as a Markdown list, one item per line at the block's indent; help() shows it as written."""
        if SECTION.fullmatch(m[1]):
            return m[0]
        lines = m[2].rstrip("\n").split("\n")
        indent = len(lines[0]) - len(lines[0].lstrip())
        items = [("- " if len(line) - len(line.lstrip()) == indent else "  ") + line.strip() for line in lines]
        return m[1] + "\n\n" + "\n".join(items) + "\n"
