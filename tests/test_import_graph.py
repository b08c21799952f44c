"""The import graph of ``src/foxhunt`` has no cycle: the layers are a strict order.

data → features → market → env → agents → backtest → train → tune / scorecard → cli, with
``foxhunt.kernels`` a leaf (it imports nothing of ours outside itself) and ``foxhunt.accel`` a
resolver the layers use. A module may import only from below it, so no two modules import each
other, directly or around a longer circle.

The graph is read from the source with ``ast`` (nothing is imported): every ``import`` and
``from … import`` statement anywhere in a module counts (top level, inside a function, under
``if TYPE_CHECKING:``: a lazy import is still an import), relative imports are resolved, and
``from pkg import name`` where ``pkg.name`` is a module counts as importing that module. A package's
``__init__`` is the module ``pkg``; importing ``pkg.sub`` is an edge to ``pkg.sub`` only (Python
also runs ``pkg/__init__``, but that is the package's own re-export, not a dependency of the
importer). ``importlib.import_module`` strings (``foxhunt.config.SECTION_MODULES``, the registry
of config sections) are not statements and are not read.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def find_modules(src: Path, top: str) -> dict[str, tuple[Path, bool]]:
    """{dotted module name: (file, is a package __init__)} of every .py file under src/top."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted((src / top).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_pkg)
    return out


def import_graph(src: Path, top: str) -> dict[str, dict[str, str]]:
    """{module: {imported module: "file:line" of the first import}} restricted to ``top``.*."""
    mods = find_modules(src, top)
    graph: dict[str, dict[str, str]] = {m: {} for m in mods}
    for mod, (path, is_pkg) in mods.items():
        package = mod if is_pkg else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    base_name = ".".join(base)
                    source = f"{base_name}.{node.module}" if node.module else base_name
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in mods else source for a in node.names]
            else:
                continue
            for t in targets:
                if t.split(".")[0] != top:
                    continue
                while t not in mods and "." in t:  # `import top.pkg.name` of a non-module: its module
                    t = t.rpartition(".")[0]
                if t in mods and t != mod:
                    graph[mod].setdefault(t, f"{path.relative_to(src)}:{node.lineno}")
    return graph


def strongly_connected(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The components of more than one module (Tarjan), each sorted, in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def a_cycle(graph: dict[str, dict[str, str]], comp: list[str]) -> list[str]:
    """One circle through the component's first module: [m0, m1, …, m0] (shortest, by BFS)."""
    inside, start = set(comp), comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w not in inside:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp  # pragma: no cover (a component always holds a circle)


def describe(graph: dict[str, dict[str, str]], comps: list[list[str]]) -> str:
    lines = []
    for comp in comps:
        circle = a_cycle(graph, comp)
        lines.append(f"import cycle among {len(comp)} modules ({', '.join(comp)}), e.g. " + " -> ".join(circle))
        for a, b in zip(circle, circle[1:]):
            lines.append(f"    {a} imports {b} at {graph[a][b]}")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, str]]:
    return import_graph(SRC, "foxhunt")


def test_no_import_cycle(graph: dict[str, dict[str, str]]) -> None:
    assert len(graph) > 100  # the whole package was read
    comps = strongly_connected(graph)
    assert not comps, "\n" + describe(graph, comps)


def test_kernels_are_a_leaf(graph: dict[str, dict[str, str]]) -> None:
    leaks = [f"{m} imports {t} at {where}" for m, edges in graph.items() if m.startswith("foxhunt.kernels")
             for t, where in edges.items() if not (t == "foxhunt.kernels" or t.startswith("foxhunt.kernels."))]
    assert not leaks, "foxhunt.kernels must import nothing of foxhunt outside it:\n" + "\n".join(leaks)


def test_only_the_entry_point_is_above_the_commands(graph: dict[str, dict[str, str]]) -> None:
    """foxhunt.cli imports every command module; nothing imports foxhunt.cli (consoles and the
    path / time helpers the commands share are in foxhunt.console)."""
    users = [f"{m} at {edges['foxhunt.cli']}" for m, edges in graph.items() if "foxhunt.cli" in edges]
    assert not users, "foxhunt.cli is the entry point; imported by:\n" + "\n".join(users)
    assert {"foxhunt.train.cli_cmd", "foxhunt.backtest.cli_cmd", "foxhunt.tune.cli_cmd",
            "foxhunt.scorecard.cli_cmd"} <= set(graph["foxhunt.cli"])


# ------------------------------------------------------------------ the checker itself
def _package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / "pkg" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_checker_reads_every_kind_of_import(tmp_path: Path) -> None:
    src = _package(tmp_path, {
        "__init__.py": "from . import a\n",
        "a.py": "import os\nfrom pkg.sub import leaf\n",
        "b.py": "def f():\n    from .sub.leaf import X\n    import pkg.a.missing\n    from pkg.sub import Thing\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.leaf import Thing\n",
        "d.py": "",
        "sub/__init__.py": "from ..d import *\n",
        "sub/leaf.py": "from .. import c\n",
    })
    g = import_graph(src, "pkg")
    assert g == {
        "pkg": {"pkg.a": "pkg/__init__.py:1"},
        "pkg.a": {"pkg.sub.leaf": "pkg/a.py:2"},
        "pkg.b": {"pkg.sub.leaf": "pkg/b.py:2", "pkg.a": "pkg/b.py:3", "pkg.sub": "pkg/b.py:4"},
        "pkg.c": {"pkg.sub.leaf": "pkg/c.py:3"},
        "pkg.d": {},
        "pkg.sub": {"pkg.d": "pkg/sub/__init__.py:1"},
        "pkg.sub.leaf": {"pkg.c": "pkg/sub/leaf.py:1"},
    }
    comps = strongly_connected(g)
    assert comps == [["pkg.c", "pkg.sub.leaf"]]  # a type-only import closes a circle too
    text = describe(g, comps)
    assert "pkg.c -> pkg.sub.leaf -> pkg.c" in text and "pkg/sub/leaf.py:1" in text and "pkg/c.py:3" in text


def test_checker_sees_a_lazy_two_module_cycle(tmp_path: Path) -> None:
    src = _package(tmp_path, {"__init__.py": "", "x.py": "from pkg.y import g\n", "y.py": "def g():\n    from pkg import x\n"})
    g = import_graph(src, "pkg")
    assert strongly_connected(g) == [["pkg.x", "pkg.y"]]
    assert "pkg.x -> pkg.y -> pkg.x" in describe(g, strongly_connected(g))
