"""Functions at human size: no hand-written function of src/hetsched is over 80 lines.

Generated code is exempt: the gRPC stubs (``*_pb2*.py``) and alembic migrations. A function
counts from its ``def`` (decorators aside) to its last line, nested functions included.
"""

from __future__ import annotations

import ast
from pathlib import Path

from builders import ROOT

LIMIT = 80


def _generated(path: Path) -> bool:
    return "_pb2" in path.name or "migrations" in path.parts


def long_functions(root: Path) -> list[str]:
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if _generated(path):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > LIMIT:
                    where = path.relative_to(root)
                    found.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_hand_written_function_is_over_80_lines() -> None:
    assert long_functions(ROOT / "src" / "hetsched") == []


def test_the_count_finds_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "long.py").write_text(f"def long() -> None:\n{body}\n")
    (tmp_path / "api_pb2.py").write_text(f"def generated() -> None:\n{body}\n")
    assert long_functions(tmp_path) == [f"long.py:1 long ({LIMIT + 1} lines)"]
