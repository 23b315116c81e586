"""The plugin registry: built-ins found through the entry points, one place lists them."""

from __future__ import annotations

import ast

import pytest
from pydantic import BaseModel

from builders import ROOT
from hetsched import builtins
from hetsched.framework import Registry, installed, parse_profile, register
from hetsched.framework.registry import spec_of


def _marked_plugins(under: str = "") -> set[str]:
    """Every class under src/hetsched (or its folder ``under``) decorated with @register,
    by class name, but the federation's unless asked for: those are bound to a federation's
    book and listed by ``federation_plugins``, not built in."""
    found: set[str] = set()
    root = ROOT / "src" / "hetsched"
    for path in (root / under).rglob("*.py"):
        if not under and path.is_relative_to(root / "federation"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                for deco in node.decorator_list:
                    if isinstance(deco, ast.Call) and getattr(deco.func, "id", "") == "register":
                        found.add(node.name)
    return found


def test_every_plugin_in_the_source_is_listed_in_builtins() -> None:
    listed = {cls.__name__ for cls in builtins.plugins()}
    assert _marked_plugins() == listed


def test_every_federation_plugin_is_listed_by_federation_plugins() -> None:
    from hetsched.federation.plugins import Book, federation_plugins

    listed = {cls.__name__ for cls in federation_plugins(Book())}
    assert _marked_plugins("federation") == listed


def test_the_installed_registry_is_the_builtins() -> None:
    assert installed().names() == sorted(spec_of(c).name for c in builtins.plugins())


def test_marking_a_class_registers_nothing() -> None:
    @register("only-marked")
    class Marked:
        def score(self) -> None: ...

    assert "only-marked" not in installed()
    assert spec_of(Marked).points == {"score"}
    with pytest.raises(Exception, match="unknown plugin 'only-marked'"):
        parse_profile({"score": ["only-marked"]})
    own = Registry([Marked])
    assert (
        parse_profile(
            {"score": ["only-marked"], "filter": []}, registry=own.with_plugins(*builtins.plugins())
        )
        .score[0]
        .name
        == "only-marked"
    )


def test_a_class_that_is_not_a_plugin_is_refused() -> None:
    class Plain(BaseModel):
        pass

    with pytest.raises(TypeError, match="not a plugin"):
        Registry([Plain])


def test_an_empty_registry_says_the_plugins_are_not_installed() -> None:
    with pytest.raises(KeyError, match=r"no plugins are installed.*make setup"):
        Registry().lookup("fit")
