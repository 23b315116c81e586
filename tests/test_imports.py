"""The import graph of src/hetsched has no cycle.

Every import statement counts: at module level, inside functions, and under
``if TYPE_CHECKING:``. ``from a.b import c`` is an edge to ``a.b.c`` when that is a module,
else to ``a.b``; importing a submodule is not counted as importing its parent packages
(Python runs a package's ``__init__`` first, but a package that imports its own modules is
not a cycle of design).
"""

from __future__ import annotations

import ast
from pathlib import Path

from builders import ROOT

SRC = ROOT / "src"

#: cycles that exist today and are being taken apart: job speeds (model/speed.py names Job
#: for its type hints). The test fails if one disappears without this list shrinking, or a
#: new one appears.
KNOWN: set[frozenset[str]] = {frozenset({"hetsched.model.job", "hetsched.model.speed"})}


def modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package)."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted((SRC / "hetsched").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, package)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, (path, package) in mods.items():
        here = name if package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join([*parts, base] if base else parts)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.append(full if full in mods else base)
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


def test_the_graph_is_read_from_every_kind_of_import() -> None:
    graph = import_graph()
    # module level, a function-level import, and a TYPE_CHECKING one are all edges
    assert "hetsched.scheduler.cycle" in graph["hetsched.scheduler.core"]
    assert "hetsched.scheduler.why" in graph["hetsched.scheduler.core"]
    assert "hetsched.keys" in graph["hetsched.cluster.state"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    found = {frozenset(c) for c in cycles(import_graph())}
    assert found - KNOWN == set(), f"new import cycles: {sorted(map(sorted, found - KNOWN))}"
    assert KNOWN - found == set(), "a known cycle is gone: remove it from KNOWN"


def test_keys_import_nothing_of_the_package() -> None:
    assert import_graph()["hetsched.keys"] == set()


#: what the framework may import: the layers below it, and the round solvers, a leaf
#: library (numpy and scipy only) whose policy names a profile's ``rounds`` is checked against
BELOW_FRAMEWORK = ("hetsched.cluster", "hetsched.model", "hetsched.keys", "hetsched.rounds")


def test_no_package_imports_its_plugins_back() -> None:
    graph = import_graph()
    framework = {m for m in graph if m.startswith("hetsched.framework")}
    upward = {t for m in framework for t in graph[m] if not t.startswith("hetsched.framework")}
    assert all(t.startswith(BELOW_FRAMEWORK) for t in upward)


def test_the_round_solvers_are_a_leaf_library() -> None:
    graph = import_graph()
    rounds = {m for m in graph if m.startswith("hetsched.rounds")}
    assert {t for m in rounds for t in graph[m]} <= rounds
