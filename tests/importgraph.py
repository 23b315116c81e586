"""The import graph of a source tree, read with ``ast`` (nothing is imported).

What is an edge: every ``import`` and ``from ... import`` statement, at module level or
inside a function or class (a function-level import still ties the two modules together,
only later), except those under ``if TYPE_CHECKING:`` (read by type checkers only, never
run). ``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``;
importing a submodule is not counted as importing its parent packages (Python runs a
package's ``__init__`` first, but a package that imports its own modules is not a cycle
of design).
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["cycles", "import_graph", "modules"]


def modules(src: Path, package: str = "hetsched") -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package), for every module of ``src/package``."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``);
    an ``else:`` branch runs, so it is not skipped."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        if name == "TYPE_CHECKING":
            skipped.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    return skipped


def _targets(node: ast.AST, here: str, mods: dict[str, tuple[Path, bool]]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parts = here.split(".")
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, base] if base else parts)
    out: list[str] = []
    for alias in node.names:
        full = f"{base}.{alias.name}"
        out.append(full if full in mods else base)
    return out


def import_graph(src: Path, package: str = "hetsched") -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (see the module docstring)."""
    mods = modules(src, package)
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, (path, is_package) in mods.items():
        here = name if is_package else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            targets = _targets(node, here, mods)
            graph[name].update(t for t in targets if t in mods and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found
