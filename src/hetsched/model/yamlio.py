"""Reading YAML: every YAML file hetsched reads goes through :func:`safe_load`.

PyYAML's safe loading over libyaml (``yaml.CSafeLoader``; the pure-Python loader where
PyYAML was built without it), with a lighter constructor for the documents spec files are
made of: libyaml parses, PyYAML's resolver gives every scalar its tag and PyYAML's
constructors build every scalar that is not a string; only plain mappings and sequences
are assembled here, straight from the parser's events, without composing the node graph
first (the graph is most of the time PyYAML spends on a large file). A document with
anything else (an anchor or alias, an explicit tag, a key that is not a string, a merge
key ``<<``, a timestamp, several documents, an error) is loaded again by PyYAML's own
loader, so its value or its error is exactly PyYAML's.

Python's cyclic garbage collector is paused while a document is built: a large document
is hundreds of thousands of new containers, and each collection pass would walk them all
again (a loaded document has no garbage to collect).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

import yaml
from yaml.events import (
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import ScalarNode

__all__ = ["C_LOADER", "YAMLError", "gc_paused", "safe_load"]

YAMLError = yaml.YAMLError

#: whether PyYAML has libyaml here (the loader falls back to pure Python without it)
C_LOADER = hasattr(yaml, "CSafeLoader")

_STR = "tag:yaml.org,2002:str"
#: tags whose values are immutable (the same text gives an equal, interchangeable value)
_IMMUTABLE = frozenset(f"tag:yaml.org,2002:{name}" for name in ("int", "float", "bool", "null"))
#: the tags of a node without an explicit one
_IMPLICIT = (None, "!")
_MISSING: Any = object()
_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _NotPlain(Exception):
    """The document has more than plain mappings, sequences and scalars: PyYAML builds it."""


class _Loader(_Base):  # type: ignore[misc]  # PyYAML's loaders are untyped classes
    """The safe loader; :meth:`plain_document` builds a plain document from the events."""

    def _not_a_string(self, event: Any, tag: str) -> Any:
        """A scalar whose tag is not ``str``: a number, a boolean or null, built by PyYAML's
        constructor (plain_document keeps it for every equal scalar: it is immutable)."""
        if tag not in _IMMUTABLE:
            # timestamps, binary, merge and value keys, a constructor a subclass added
            raise _NotPlain
        node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, event.style)
        return self.construct_object(node, deep=True)

    def plain_document(self) -> Any:
        """The one document of the stream; _NotPlain when it is not plain (see the
        module docstring)."""
        if self.yaml_path_resolvers:
            raise _NotPlain  # tags that depend on where a node is: the composer knows
        get = self.get_event
        build = self._builder()
        get()  # the stream's start
        if type(get()) is not DocumentStartEvent:
            raise _NotPlain  # no document: PyYAML says what an empty stream is
        root = build(get())
        if type(get()) is not DocumentEndEvent or type(get()) is not StreamEndEvent:
            raise _NotPlain  # another document: PyYAML's error
        return root

    def _builder(self) -> Callable[[Any], Any]:
        """``build(event)``: the value of the node that starts with ``event``, its events
        read from the parser to its end; _NotPlain when it is not plain."""
        get = self.get_event
        # (text, implicit flags) -> the scalar's value, for every scalar without an anchor
        # or an explicit tag: a string or an immutable value, so one object serves every
        # occurrence (a large file says ``"4"`` and ``"gpu"`` thousands of times)
        known: dict[tuple[str, Any], Any] = {}
        resolve = self.resolve
        not_a_string = self._not_a_string

        def scalar(event: Any) -> Any:
            if event.anchor is not None or event.tag not in _IMPLICIT:
                raise _NotPlain  # an anchor (PyYAML checks them), an explicit tag
            key = (event.value, event.implicit)
            value = known.get(key, _MISSING)
            if value is _MISSING:
                tag = resolve(ScalarNode, event.value, event.implicit)
                value = known[key] = event.value if tag == _STR else not_a_string(event, tag)
            return value

        def mapping() -> dict[str, Any]:
            out: dict[str, Any] = {}
            key = get()
            while type(key) is ScalarEvent:
                # scalar(), inlined for the common case: most of a file's events are keys
                name = known.get((key.value, key.implicit), _MISSING)
                if name is _MISSING or key.anchor is not None or key.tag not in _IMPLICIT:
                    name = scalar(key)
                if type(name) is not str:
                    raise _NotPlain  # a number, a null or a merge key as a key
                value = get()
                out[name] = scalar(value) if type(value) is ScalarEvent else build(value)
                key = get()
            if type(key) is not MappingEndEvent:
                raise _NotPlain  # a collection or an alias as a key
            return out

        def build(event: Any) -> Any:
            kind = type(event)
            if kind is ScalarEvent:
                return scalar(event)
            if event.anchor is not None or event.tag not in _IMPLICIT:
                raise _NotPlain
            if kind is MappingStartEvent:
                return mapping()
            if kind is SequenceStartEvent:
                items: list[Any] = []
                event = get()
                while type(event) is not SequenceEndEvent:
                    items.append(build(event))
                    event = get()
                return items
            raise _NotPlain  # an alias

        return build


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


def _pyyaml_load(data: Any) -> Any:
    loader = _Base(data)
    try:
        return loader.get_single_data()
    except RecursionError:
        raise yaml.YAMLError("the document is nested too deeply") from None
    finally:
        loader.dispose()


def safe_load(stream: str | bytes | IO[str] | IO[bytes]) -> Any:
    """One YAML document as plain Python values, like ``yaml.safe_load`` (with libyaml).

    Raises ``yaml.YAMLError`` on malformed YAML, and ``yaml.YAMLError`` too (not
    RecursionError) on a document nested deeper than the interpreter's stack allows.
    """
    with gc_paused():
        if not isinstance(stream, str | bytes):
            return _pyyaml_load(stream)  # a stream is read once: PyYAML reads it
        loader = _Loader(stream)
        try:
            return loader.plain_document()
        except Exception:  # _NotPlain, or an error: PyYAML's loader gives its own
            pass
        finally:
            loader.dispose()
        return _pyyaml_load(stream)
