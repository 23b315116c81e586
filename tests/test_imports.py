"""The import graph of src/hetsched has no cycle.

The rule (read by :mod:`importgraph`): every import statement is an edge, at module level
and inside functions (a function-level import ties the two modules together all the same,
only later); an import under ``if TYPE_CHECKING:`` is not an edge (type checkers read it,
Python never runs it). ``from a.b import c`` is an edge to ``a.b.c`` when that is a module,
else to ``a.b``; importing a submodule is not counted as importing its parent packages
(Python runs a package's ``__init__`` first, but a package that imports its own modules is
not a cycle of design).
"""

from __future__ import annotations

from pathlib import Path

from builders import ROOT
from importgraph import cycles, import_graph

SRC = ROOT / "src"

#: cycles that exist today and are being taken apart (none): the test fails if one
#: disappears without this set shrinking, or a new one appears.
KNOWN: set[frozenset[str]] = set()


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_function_level_imports_are_edges_and_type_checking_imports_are_not(
    tmp_path: Path,
) -> None:
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "def later():\n    from pkg.c import thing\n",
            "pkg/c.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg import a\nelse:\n    import pkg.d\n"
            ),
            "pkg/d.py": "import typing\nif typing.TYPE_CHECKING:\n    from . import a\n",
        },
    )
    graph = import_graph(src, "pkg")
    assert graph == {
        "pkg": set(),
        "pkg.a": {"pkg.b"},
        "pkg.b": {"pkg.c"},
        "pkg.c": {"pkg.d"},
        "pkg.d": set(),
    }
    assert cycles(graph) == []


def test_a_function_level_import_closes_a_cycle(tmp_path: Path) -> None:
    src = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "def later():\n    from pkg import a\n",
        },
    )
    assert cycles(import_graph(src, "pkg")) == [["pkg.a", "pkg.b"]]


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_graph_of_the_package_is_read() -> None:
    graph = import_graph(SRC)
    assert "hetsched.scheduler.cycle" in graph["hetsched.scheduler.core"]
    assert "hetsched.model.speed" in graph["hetsched.model.job"]


def test_no_import_cycles() -> None:
    found = {frozenset(c) for c in cycles(import_graph(SRC))}
    assert found - KNOWN == set(), f"new import cycles: {sorted(map(sorted, found - KNOWN))}"
    assert KNOWN - found == set(), "a known cycle is gone: remove it from KNOWN"


def test_keys_import_nothing_of_the_package() -> None:
    assert import_graph(SRC)["hetsched.keys"] == set()


#: what the framework may import: the layers below it, and the round solvers, a leaf
#: library (numpy and scipy only) whose policy names a profile's ``rounds`` is checked against
BELOW_FRAMEWORK = ("hetsched.cluster", "hetsched.model", "hetsched.keys", "hetsched.rounds")


def test_no_package_imports_its_plugins_back() -> None:
    graph = import_graph(SRC)
    framework = {m for m in graph if m.startswith("hetsched.framework")}
    upward = {t for m in framework for t in graph[m] if not t.startswith("hetsched.framework")}
    assert all(t.startswith(BELOW_FRAMEWORK) for t in upward)


def test_the_round_solvers_are_a_leaf_library() -> None:
    graph = import_graph(SRC)
    rounds = {m for m in graph if m.startswith("hetsched.rounds")}
    assert {t for m in rounds for t in graph[m]} <= rounds
