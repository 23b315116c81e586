"""Reading YAML, fast: every YAML file hetsched reads goes through :func:`safe_load`.

PyYAML's safe loading, with four changes that keep its results and make it several times
faster on the large cluster and job files ``place`` and the simulator read:

- a document given as text or bytes that lies entirely in the common block-style subset
  (block mappings and sequences of one-line plain and quoted scalars, one-line flow
  sequences and mappings of such scalars, nested, comments; the subset is spelled out in
  :mod:`hetsched.model.yamlblock`) is read line by line without PyYAML's composer, about
  six times faster; its scalars that are not strings are still resolved and built by
  PyYAML's own resolver and constructors, and every other document (anchors, tags,
  multi-line scalars or flow collections, several documents, streams, anything PyYAML refuses)
  goes to the loader below, so the value or the error is PyYAML's;
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
import operator
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from hetsched.model.yamlblock import DECLINED, load_block

__all__ = ["C_LOADER", "YAMLError", "gc_paused", "safe_load"]

YAMLError = yaml.YAMLError

#: whether PyYAML has libyaml here (the loader falls back to pure Python without it)
C_LOADER = hasattr(yaml, "CSafeLoader")

_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
#: tags whose values are immutable (the same text gives an equal, interchangeable value)
_IMMUTABLE = frozenset(f"tag:yaml.org,2002:{name}" for name in ("int", "float", "bool", "null"))
_MISSING = object()
#: C functions without effects, of two arguments and of none (see _Loader.__init__)
_IGNORE_TWO: Callable[[Any, Any], object] = operator.is_
_IGNORE_NONE: Callable[[], object] = tuple
_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc]  # PyYAML's loaders are untyped classes
    """The safe loader with a fast path for plain strings, lists and mappings."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        # the composer asks for the tag of every node: a large file asks the same few
        # questions (``"4"``, ``"gpu"``, a mapping) a hundred thousand times
        self._tags: dict[tuple[Any, Any, Any], str] = {}
        if not self.yaml_path_resolvers:
            # the composer calls these two around every node, for path resolvers the safe
            # loader does not have: C callables that take the same arguments and do
            # nothing with them cost less than Python no-ops (a few % of the composer)
            self.descend_resolver = _IGNORE_TWO
            self.ascend_resolver = _IGNORE_NONE

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        key = (kind, value, implicit)
        tag = self._tags.get(key)
        if tag is None:
            tag = super().resolve(kind, value, implicit)
            # a path resolver makes the tag depend on where the node is: no memo then
            if not self.yaml_path_resolvers:
                self._tags[key] = tag
        return tag

    def construct_document(self, node: Node) -> Any:
        self._built: dict[int, Any] = {}
        self._scalars: dict[tuple[str, str], Any] = {}
        try:
            return self._build(node)
        except RecursionError:
            raise
        except Exception:  # raised again below, in PyYAML's order
            # the walk builds depth first, PyYAML breadth first through its generators:
            # which error comes first (and its marks) is PyYAML's, so PyYAML builds again
            self._reset()
            return super().construct_document(node)
        finally:
            self._built = {}
            self._scalars = {}
            self._reset()

    def _reset(self) -> None:
        self.constructed_objects: dict[Node, Any] = {}
        self.recursive_objects: dict[Node, None] = {}
        self.state_generators: list[Any] = []
        self.deep_construct = False

    def _build(self, node: Node) -> Any:
        kind = type(node)
        if kind is ScalarNode:
            tag = node.tag
            if tag == _STR:
                return node.value
            if tag in _IMMUTABLE:
                # numbers, booleans and nulls are values: one per distinct text is enough
                key = (tag, node.value)
                value = self._scalars.get(key, _MISSING)
                if value is _MISSING:
                    value = self._scalars[key] = self.construct_object(node, deep=True)
                return value
        elif kind is MappingNode:
            if node.tag == _MAP:
                mapping = self._plain_mapping(node)
                if mapping is not None:
                    return mapping
        elif kind is SequenceNode and node.tag == _SEQ:
            # an alias is the same node again: the same object, as PyYAML builds it
            built = self._built
            seen = built.get(id(node))
            if seen is not None:
                return seen
            items: list[Any] = []
            built[id(node)] = items
            build = self._build
            items.extend([build(child) for child in node.value])
            return items
        return self.construct_object(node, deep=True)

    def _plain_mapping(self, node: Node) -> dict[str, Any] | None:
        """The mapping when every key is a plain string (no merge key ``<<``, no number or
        collection as a key), else None."""
        built = self._built
        seen = built.get(id(node))
        if seen is not None:
            return seen  # type: ignore[no-any-return]
        pairs = node.value
        for key, _value in pairs:
            if type(key) is not ScalarNode or key.tag != _STR:
                return None
        mapping: dict[str, Any] = {}
        built[id(node)] = mapping
        build = self._build
        # every value is built, in order, a duplicate key's too: as in PyYAML, a value
        # that cannot be built is an error even when a later duplicate replaces it
        for key, value in pairs:
            mapping[key.value] = build(value)
        return mapping


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
        if isinstance(stream, str | bytes):
            value = load_block(stream, _Loader(""))
            if value is not DECLINED:
                return value
        loader = _Loader(stream)
        try:
            return loader.get_single_data()
        except RecursionError:
            raise yaml.YAMLError("the document is nested too deeply") from None
        finally:
            loader.dispose()
