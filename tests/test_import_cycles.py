"""No import circle between any two modules of the project: the graph of `import`s between the modules of
core, data_prep, reward, eval, recipes, quotecite and launch (module-level and function-level imports alike) is acyclic."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "data_prep", "reward", "eval", "recipes", "quotecite", "launch")

KNOWN_CIRCLES: set[frozenset[str]] = set()
"""Circles being taken apart elsewhere; each entry names its modules. Empty means none is tolerated."""


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The project module that ``import name`` (or ``from name import x``) loads, or None for a third-party one."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph(root: Path = REPO) -> dict[str, set[str]]:
    dirs = [root / pkg for pkg in PACKAGES] if root == REPO else [root]
    files = {_module_name(p, root): p for d in dirs for p in sorted(d.rglob("*.py"))}
    modules = set(files)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                # `from pkg import sub` imports the submodule when there is one
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                dep = _resolve(t, modules)
                if dep and dep != mod:
                    graph[mod].add(dep)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle():
    found = [c for c in circles(import_graph()) if frozenset(c) not in KNOWN_CIRCLES]
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_check_sees_a_circle_through_a_function_level_import(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import x\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from . import c\n")
    (tmp_path / "pkg" / "c.py").write_text("def g():\n    import pkg.a\n")
    (tmp_path / "pkg" / "d.py").write_text("import pkg.a\n")
    assert circles(import_graph(tmp_path)) == [["pkg.a", "pkg.b", "pkg.c"]]
