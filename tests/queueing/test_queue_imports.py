"""The queue sits below the scheduler: no module of ``hetsched.queueing`` imports one of
``hetsched.scheduler`` when it runs (at module level or inside a function). Imports under
``if TYPE_CHECKING:`` are for type hints only and are not counted: the queue names the
core's job record in its signatures without importing it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from builders import ROOT

QUEUEING = ROOT / "src" / "hetsched" / "queueing"


def _type_only(node: ast.If) -> bool:
    test = node.test
    name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
    return name == "TYPE_CHECKING"


def runtime_imports(source: str) -> set[str]:
    """Modules a source imports when it runs (relative imports are not used here)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import a.b\nfrom c import d\n", {"a.b", "c"}),
        ("def f():\n    from hetsched.scheduler import x\n", {"hetsched.scheduler"}),
        ("if TYPE_CHECKING:\n    from hetsched.scheduler import x\n", set()),
        ("if typing.TYPE_CHECKING:\n    import a\nelse:\n    import b\n", {"b"}),
    ],
)
def test_runtime_imports_skip_type_only_blocks(source: str, expected: set[str]) -> None:
    assert runtime_imports(source) == expected


@pytest.mark.parametrize("path", sorted(QUEUEING.glob("*.py")), ids=lambda p: p.name)
def test_the_queue_imports_nothing_of_the_scheduler(path: Path) -> None:
    imports = runtime_imports(path.read_text(encoding="utf-8"))
    assert sorted(m for m in imports if m.startswith("hetsched.scheduler")) == []
