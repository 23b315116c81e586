"""Reading YAML, fast: every YAML file hetsched reads goes through :func:`safe_load`.

PyYAML's safe loading, with three changes that keep its results and make it several times
faster on the large cluster and job files ``place`` and the simulator read:

- the C parser and composer (libyaml, ``yaml.CSafeLoader``) where PyYAML was built with
  it, the pure-Python loader otherwise;
- plain strings, lists and mappings are built by one tight walk over the composed nodes;
  every other node (numbers, booleans, nulls, timestamps, merge keys, explicit tags) goes
  through PyYAML's own constructors, so the values are the same;
- Python's cyclic garbage collector is paused while the document is built: a large document
  is hundreds of thousands of new containers, and each collection pass would walk them all
  again (a loaded document has no garbage to collect).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = ["C_LOADER", "YAMLError", "gc_paused", "safe_load"]

YAMLError = yaml.YAMLError

#: whether PyYAML has libyaml here (the loader falls back to pure Python without it)
C_LOADER = hasattr(yaml, "CSafeLoader")

_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc]  # PyYAML's loaders are untyped classes
    """The safe loader with a fast path for plain strings, lists and mappings."""

    def construct_document(self, node: Node) -> Any:
        self._built: dict[int, Any] = {}
        try:
            return self._build(node)
        finally:
            self._built = {}
            self.constructed_objects: dict[Node, Any] = {}
            self.recursive_objects: dict[Node, None] = {}
            self.deep_construct = False

    def _build(self, node: Node) -> Any:
        if type(node) is ScalarNode and node.tag == _STR:
            return node.value
        if type(node) is SequenceNode and node.tag == _SEQ:
            # an alias is the same node again: the same object, as PyYAML builds it
            seen = self._built.get(id(node))
            if seen is not None:
                return seen
            items: list[Any] = []
            self._built[id(node)] = items
            items.extend(self._build(child) for child in node.value)
            return items
        if type(node) is MappingNode and node.tag == _MAP and _plain_keys(node):
            seen = self._built.get(id(node))
            if seen is not None:
                return seen
            mapping: dict[str, Any] = {}
            self._built[id(node)] = mapping
            for key, value in node.value:
                mapping[key.value] = self._build(value)
            return mapping
        return self.construct_object(node, deep=True)


def _plain_keys(node: MappingNode) -> bool:
    """Every key a plain string (no merge key ``<<``, no number or collection as a key)."""
    return all(type(key) is ScalarNode and key.tag == _STR for key, _ in node.value)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many objects that all stay alive
    (reference counting still frees everything else at once); restores the previous state."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def safe_load(stream: str | bytes | IO[str] | IO[bytes]) -> Any:
    """One YAML document as plain Python values, like ``yaml.safe_load``.

    Raises ``yaml.YAMLError`` on malformed YAML, and ``yaml.YAMLError`` too (not
    RecursionError) on a document nested deeper than the interpreter's stack allows.
    """
    with gc_paused():
        loader = _Loader(stream)
        try:
            return loader.get_single_data()
        except RecursionError:
            raise yaml.YAMLError("the document is nested too deeply") from None
        finally:
            loader.dispose()
