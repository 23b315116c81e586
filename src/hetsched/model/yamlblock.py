"""The common block-style subset of YAML, read line by line without PyYAML's composer.

:func:`hetsched.model.yamlio.safe_load` tries :func:`load_block` first and falls back to
PyYAML's loader whenever it answers :data:`DECLINED`. A document is read here only when it
lies entirely in the subset below, where the line structure alone decides the result; then
the values are those PyYAML gives (every scalar that is not a string is built by PyYAML's
own resolver and constructors). Anything else, including every document PyYAML refuses,
is declined, so PyYAML gives its value or its error with its marks.

The subset, per document (``str`` or UTF-8 ``bytes``):

- printable characters only: no tab, no carriage return, no byte-order mark, no NEL,
  LINE or PARAGRAPH SEPARATOR, no non-printable character; an optional first line ``---``;
  no other line starting with ``---`` or ``...``;
- every line is blank, a comment (``#`` at its start or after a space), or an indentation
  of spaces, then ``- `` prefixes (exactly one space after each dash, or a last bare
  ``-``), then an optional ``key:`` (followed by a space or the end of the line), then an
  optional value, then an optional comment;
- keys and values are plain scalars on one line (not starting with an indicator character
  ``-?:,[]{}#&*!|>'"%@``, a dash only when followed by a non-space; no ``: `` and no
  `` #`` inside), single-quoted scalars on one line, or double-quoted ones on one line
  without a backslash; values may also be ``[]``, ``{}`` or a one-line flow sequence of
  such scalars (flow plain scalars without any of ``,?[]{}#:'"``);
- a key is a string, or a number, boolean, null or timestamp of at most 200 characters
  (no merge key ``<<``, no ``=``);
- the root is a block mapping or sequence; a nested block is deeper than its key or dash
  (a sequence may also sit at its key's indentation); every other line is exactly at the
  indentation of an open block (a deeper line would continue a multi-line scalar); at
  most 100 blocks deep.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from yaml.nodes import ScalarNode

__all__ = ["DECLINED", "load_block"]

#: what :func:`load_block` answers for a document outside the subset
DECLINED: Any = object()

_STR = "tag:yaml.org,2002:str"
#: tags whose values are immutable (the same text gives an equal, interchangeable value)
_IMMUTABLE = frozenset(f"tag:yaml.org,2002:{name}" for name in ("int", "float", "bool", "null"))
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_MAX_DEPTH = 100
_MAX_KEY = 200

_INDICATORS = r"""\-?:,\[\]{}#&*!|>'"%@`"""
_FLOW_STOP = r""",?\[\]{}#:'\""""
_PLAIN = (
    rf"(?:[^{_INDICATORS} \n]|-(?=[^ \n]))"
    r"(?:[^ \n:]|:(?=[^ \n])| +(?=[^ \n#:]|:[^ \n]))*"
)
_FLOW_PLAIN = (
    rf"(?:[^{_INDICATORS} \n]|-(?=[^ \n{_FLOW_STOP}]))"
    rf"(?:[^ \n{_FLOW_STOP}]| +(?=[^ \n{_FLOW_STOP}]))*"
)
_SINGLE = r"'(?:[^'\n]|'')*'"
_DOUBLE = r'"[^"\\\n]*"'
_ITEM = rf"{_SINGLE}|{_DOUBLE}|{_FLOW_PLAIN}"
_FLOW = rf"\[ *(?:(?:{_ITEM}) *(?:, *(?:{_ITEM}) *)*)?\]|\{{ *\}}"
#: one line: (indentation, dashes, key, value); a comment needs a space (or nothing) before
_LINE = re.compile(
    rf"( *)((?:-(?: |$))*)(?:({_PLAIN}|{_SINGLE}|{_DOUBLE}):(?: +|$))?"
    rf"({_PLAIN}|{_SINGLE}|{_DOUBLE}|{_FLOW})? *(?:(?<![^ ])#.*)?"
)
_ITEMS = re.compile(_ITEM)
_HEADER = re.compile(r"--- *(?:\n|$)")
#: anything but the printable characters of a line (YAML's, less line breaks and the BOM);
#: compiled at the first text that is not ASCII (it takes milliseconds, at every start)
_UNSAFE = "[^\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
#: for ASCII text: the control characters but the line feed, and DEL
_CONTROL = bytes(range(0x20)).replace(b"\n", b"") + b"\x7f"


class _Decline(Exception):
    """The document leaves the subset: PyYAML reads it."""


def load_block(data: str | bytes, loader: Any) -> Any:
    """The document's value, or :data:`DECLINED` when it is outside the subset.

    ``loader`` is a PyYAML loader instance: its ``resolve`` decides the tag of each plain
    scalar and its ``construct_object`` builds every scalar that is not a string.
    """
    text = _text(data)
    if text is None:
        return DECLINED
    if text.startswith(("---", "...")):
        header = _HEADER.match(text)
        if header is None:
            return DECLINED
        text = text[header.end() :]
    if "\n---" in text or "\n..." in text or text.startswith(("---", "...")):
        return DECLINED  # a second document, an end marker, or a key that looks like one
    try:
        return _Reader(loader).read(map(_Rows().__getitem__, text.split("\n")))
    except _Decline:
        return DECLINED


def _text(data: str | bytes) -> str | None:
    """The text of a document of printable characters, else None."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    else:
        text = data
    if text.isascii():
        ascii_bytes = data if isinstance(data, bytes) else text.encode("ascii")
        if len(ascii_bytes.translate(None, _CONTROL)) != len(ascii_bytes):
            return None
    elif re.search(_UNSAFE, text) is not None:
        return None
    return text


class _Rows(dict[str, tuple[str, str, str | None, str | None]]):
    """Each distinct line's (indentation, dashes, key, value), parsed once: a large file
    repeats most of its lines (``    class: gpu``)."""

    def __missing__(self, line: str) -> tuple[str, str, str | None, str | None]:
        match = _LINE.fullmatch(line)
        if match is None:
            raise _Decline  # a line outside the subset
        row: Any = match.groups()
        self[line] = row
        return row  # type: ignore[no-any-return]


def _nest(dash: str, col: int, top: list[Any], stack: list[Any]) -> tuple[int, list[Any]]:
    """Open the sequences of ``- - ...``: every dash after the first starts a sequence as
    the item of the one before; answers the innermost sequence and its column."""
    for _ in range(1, dash.count("-")):
        inner: list[Any] = []
        top.append(inner)
        stack.append((col, top, False))
        col, top = col + 2, inner
    if len(stack) > _MAX_DEPTH:
        raise _Decline
    return col, top


class _Reader:
    """One document's rows turned into values: an indentation stack of open blocks."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader
        #: the value of each scalar text seen (only immutable values are kept)
        self._scalars: dict[str, Any] = {}
        #: each plain or quoted key text that gives a string, and that string
        self._keys: dict[str, str] = {}

    def read(self, rows: Iterable[tuple[str, str, str | None, str | None]]) -> Any:
        scalars, keys = self._scalars, self._keys
        root: list[Any] = [None]
        stack: list[tuple[int, Any, bool]] = []
        # the open block: its column, its container, whether a mapping
        col_top, is_map = -1, False
        top: Any = None
        # the value awaiting a nested block: after a bare ``key:`` or ``-``, or the root
        slot: Any = root
        slot_key: Any = 0
        slot_col, slot_is_key = -1, False
        for indent, dash, key, raw in rows:
            if not (key or raw or dash):
                continue  # blank or comment
            col = len(indent)
            if slot is not None:
                if col > slot_col or (col == slot_col and slot_is_key and dash):
                    new: Any = [] if dash else {}
                    slot[slot_key] = new
                    stack.append((col_top, top, is_map))
                    if len(stack) > _MAX_DEPTH:
                        raise _Decline
                    col_top, top, is_map = col, new, not dash
                slot = None
            if col != col_top:
                while col < col_top:
                    col_top, top, is_map = stack.pop()
                if col != col_top:
                    raise _Decline  # a continuation line, or an indentation no block has
            if dash:
                if is_map:
                    raise _Decline
                if dash != "- ":
                    col_top, top = _nest(dash, col, top, stack)
                    if dash[-1] == "-":  # a bare last dash: its item is nested or null
                        top.append(None)
                        slot, slot_key, slot_col, slot_is_key = top, len(top) - 1, col_top, False
                        continue
                if key:
                    new = {}
                    top.append(new)
                    stack.append((col_top, top, False))
                    col_top, top, is_map = col_top + 2, new, True
                elif raw:
                    try:
                        top.append(scalars[raw])
                    except KeyError:
                        top.append(self._value(raw))
                    continue
                else:
                    top.append(None)
                    slot, slot_key, slot_col, slot_is_key = top, len(top) - 1, col_top, False
                    continue
            elif not key:
                raise _Decline  # a scalar alone on its line
            elif not is_map:
                # a key after a sequence at its mapping's indentation ends that sequence
                if stack[-1][0] != col or not stack[-1][2]:
                    raise _Decline
                col_top, top, is_map = stack.pop()
            try:
                name = keys[key]
            except KeyError:
                name = self._key(key)
            if raw:
                try:
                    top[name] = scalars[raw]
                except KeyError:
                    top[name] = self._value(raw)
            else:
                top[name] = None
                slot, slot_key, slot_col, slot_is_key = top, name, col_top, True
        if slot is root:
            raise _Decline  # no block at all: an empty document, or a scalar
        return root[0]

    def _plain(self, text: str) -> tuple[str, Any]:
        """The tag PyYAML resolves a plain scalar to, and its value."""
        tag = self._loader.resolve(ScalarNode, text, (True, False))
        if tag == _STR:
            return tag, text
        if tag not in _IMMUTABLE and tag != _TIMESTAMP:
            raise _Decline  # merge keys, ``=``, or a resolver someone added
        try:
            value = self._loader.construct_object(ScalarNode(tag, text), deep=True)
        except Exception:  # PyYAML raises it again, as the user's error
            raise _Decline from None
        return tag, value

    def _value(self, raw: str) -> Any:
        """The value of a value text; immutable ones are remembered."""
        first = raw[0]
        if first == "'":
            value: Any = raw[1:-1].replace("''", "'")
        elif first == '"':
            value = raw[1:-1]
        elif first == "[":
            return [self._item(item) for item in _ITEMS.findall(raw, 1)]
        elif first == "{":
            return {}
        else:
            tag, value = self._plain(raw)
            if tag == _TIMESTAMP:
                return value  # a new object for each, as PyYAML builds them
        self._scalars[raw] = value
        return value

    def _item(self, raw: str) -> Any:
        try:
            return self._scalars[raw]
        except KeyError:
            return self._value(raw)

    def _key(self, raw: str) -> Any:
        """The key of a key text; string keys are remembered, others built anew each time
        (two ``.nan`` keys are two keys, as in PyYAML)."""
        if len(raw) > _MAX_KEY:
            raise _Decline  # PyYAML limits a key to 1024 characters (or bytes) to its ':'
        first = raw[0]
        if first == "'":
            name = raw[1:-1].replace("''", "'")
        elif first == '"':
            name = raw[1:-1]
        else:
            tag, value = self._plain(raw)
            if tag != _STR:
                return value
            name = value
        self._keys[raw] = name
        return name
