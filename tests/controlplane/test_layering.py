"""The control plane's users import only its public API, and not each other.

``hetsched.service`` (``hetsched up``) and ``hetsched.federation`` are the one control plane
with two runners: each imports ``hetsched.controlplane`` itself (what its ``__init__``
exports), never a module inside it, and neither imports the other. Every import statement
counts, inside functions too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hetsched.controlplane as controlplane
from builders import ROOT

SRC = ROOT / "src" / "hetsched"

#: package -> packages it must not import (itself a prefix of module names)
FORBIDDEN = {
    "service": ("hetsched.federation",),
    "federation": ("hetsched.service",),
    "controlplane": ("hetsched.service", "hetsched.federation"),
}


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every absolute import in ``path``."""
    out: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.lineno, node.module, [a.name for a in node.names]))
    return out


def _offences(package: str) -> list[str]:
    found = []
    for path in sorted((SRC / package).rglob("*.py")):
        where = path.relative_to(SRC)
        for line, module, names in _imports(path):
            if any(module == f or module.startswith(f + ".") for f in FORBIDDEN[package]):
                found.append(f"{where}:{line} imports {module}")
            inside = module.startswith("hetsched.controlplane.")
            if package != "controlplane" and inside:
                found.append(f"{where}:{line} imports {module}, inside the control plane")
            if package != "controlplane" and module == "hetsched.controlplane":
                private = [n for n in names if n not in controlplane.__all__]
                if private:
                    found.append(f"{where}:{line} imports {private}, not exported")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_the_control_plane_users_import_only_its_public_api(package: str) -> None:
    assert _offences(package) == []


def test_every_exported_name_exists() -> None:
    missing = [name for name in controlplane.__all__ if not hasattr(controlplane, name)]
    assert missing == []
