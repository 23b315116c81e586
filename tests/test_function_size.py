"""Functions and modules at human size: no hand-written function of src/hetsched is over 60
lines, and no hand-written module over 500.

Generated code is exempt: the gRPC stubs (``*_pb2*.py``) and alembic migrations. A function
counts from its ``def`` (decorators aside) to its last line, nested functions included; a
module counts every line of its file.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from builders import ROOT

LIMIT = 60
MODULE_LIMIT = 500


def _generated(path: Path) -> bool:
    return "_pb2" in path.name or "migrations" in path.parts


def _hand_written(root: Path) -> list[Path]:
    return [path for path in sorted(root.rglob("*.py")) if not _generated(path)]


def long_functions(root: Path) -> list[str]:
    found: list[str] = []
    for path in _hand_written(root):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > LIMIT:
                    where = path.relative_to(root)
                    found.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    return found


def long_modules(root: Path) -> list[str]:
    found: list[str] = []
    for path in _hand_written(root):
        length = len(path.read_text(encoding="utf-8").splitlines())
        if length > MODULE_LIMIT:
            found.append(f"{path.relative_to(root)} ({length} lines)")
    return found


def test_no_hand_written_function_is_over_60_lines() -> None:
    assert long_functions(ROOT / "src" / "hetsched") == []


def test_no_hand_written_module_is_over_500_lines() -> None:
    assert long_modules(ROOT / "src" / "hetsched") == []


def test_the_count_finds_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "long.py").write_text(f"def long() -> None:\n{body}\n")
    (tmp_path / "api_pb2.py").write_text(f"def generated() -> None:\n{body}\n")
    assert long_functions(tmp_path) == [f"long.py:1 long ({LIMIT + 1} lines)"]


@pytest.mark.parametrize(
    ("lines", "expected"),
    [(MODULE_LIMIT, []), (MODULE_LIMIT + 1, [f"big.py ({MODULE_LIMIT + 1} lines)"])],
)
def test_the_count_finds_a_long_module(tmp_path: Path, lines: int, expected: list[str]) -> None:
    text = "\n".join(f"x{i} = {i}" for i in range(lines)) + "\n"
    (tmp_path / "big.py").write_text(text)
    (tmp_path / "api_pb2_grpc.py").write_text(text + text)
    (tmp_path / "migrations").mkdir()
    (tmp_path / "migrations" / "v1.py").write_text(text + text)
    assert long_modules(tmp_path) == expected
