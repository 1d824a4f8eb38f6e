"""No import cycle in ndpe/, train/ or models/: the graph of their modules, read with ``ast`` (imports inside
functions and under ``TYPE_CHECKING`` included), has no cycle."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ndpe", "train", "models")


def module_names(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``: dotted name -> file (a package is its ``__init__.py``)."""
    names = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that module ``name`` (file ``path``) imports, anywhere in its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: the package, `level - 1` packages up
                parent = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]  # `from . import x`: x a module?
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `ndpe.registry.make` -> ndpe.registry
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports."""
    modules = module_names(root, packages)
    return {name: imported(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle ``[a, b, ..., a]`` per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(path_around(graph, set(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def path_around(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A cycle through the first module of ``component``, inside it (breadth-first: a shortest one)."""
    start = min(component)
    paths = {start: [start]}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph[v] & component):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                todo.append(w)
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .b import g\n")
    (package / "a.py").write_text("from .sub import b\n")
    (package / "sub" / "b.py").write_text("def g():\n    from ..a import f\n")
    (package / "c.py").write_text("import pkg.a\nfrom pkg import sub\n")  # imports into the cycle, not part of it
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.a"}
    assert graph["pkg.c"] == {"pkg", "pkg.a", "pkg.sub"}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.a"]]
    graph["pkg.sub.b"] = set()  # the function-level import removed: no cycle left
    assert cycles(graph) == []


def test_the_contract_imports_no_kernel_and_the_figures_data_no_matplotlib():
    graph = import_graph()
    seen, todo = set(), ["ndpe.contract"]
    while todo:  # every module the contract imports, directly or not
        for w in graph[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    assert not {m for m in seen if m.startswith(("ndpe.kernels", "ndpe.functional"))}, sorted(seen)
    code = "import sys, ndpe.viz, ndpe.cli; assert 'matplotlib' not in sys.modules, 'imported matplotlib'"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
