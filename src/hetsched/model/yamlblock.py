"""The common block-style subset of YAML (with one-line flow collections), read line by line
without PyYAML's composer.

:func:`hetsched.model.yamlio.safe_load` tries :func:`load_block` first and falls back to
PyYAML's loader whenever it answers :data:`DECLINED`. A document is read here only when it
lies entirely in the subset below, where the line structure alone decides the result; then
the values are those PyYAML gives (every scalar that is not a string is built by PyYAML's
own resolver and constructors). Anything else, including every document PyYAML refuses,
is declined, so PyYAML gives its value or its error with its marks.

The subset, per document (``str`` or UTF-8 ``bytes``):

- printable characters only: no tab, no byte-order mark, no NEL, LINE or PARAGRAPH
  SEPARATOR, no non-printable character, no carriage return but in CR LF line breaks
  (read as LF); an optional first line ``---``; no other line starting with ``---`` or
  ``...``;
- every line is blank, a comment (``#`` at its start or after a space), or an indentation
  of spaces, then ``- `` prefixes (exactly one space after each dash, or a last bare
  ``-``), then an optional ``key:`` (followed by a space or the end of the line), then an
  optional value, then an optional comment;
- keys and values are plain scalars on one line (not starting with an indicator character
  ``-?:,[]{}#&*!|>'"%@``, a dash only when followed by a non-space; no ``: `` and no
  `` #`` inside), single-quoted scalars on one line, or double-quoted ones on one line
  without a backslash; values may also be one-line flow collections (below);
- a flow collection is on one line, ``[`` values separated by commas ``]`` or ``{``
  entries ``key: value`` separated by commas ``}``, nested at most 20 deep; its keys are
  scalars, its values scalars or flow collections; a scalar in it is single-quoted,
  double-quoted without a backslash, or plain without any of ``,?[]{}#:'"`` (where a
  plain scalar ends in flow context is then the same for PyYAML's scanner and libyaml's,
  and no ``:`` is read as part of one); every key is followed at once by ``:`` and a
  space (``{a:1}``, ``{a : 1}``, ``{'a':1}`` are declined: PyYAML and libyaml differ on
  some); no empty entry, no trailing comma, no key without ``: value``, no pair in a
  sequence, no ``?``, no ``#`` outside quotes, nothing after the closing bracket but
  spaces and a comment; duplicate keys keep the last value at the first key's place, as
  in PyYAML;
- a key is a string, or a number, boolean, null or timestamp of at most 200 characters
  (no merge key ``<<``, no ``=``);
- the root is a block mapping or sequence; a nested block is deeper than its key or dash
  (a sequence may also sit at its key's indentation); every other line is exactly at the
  indentation of an open block (a deeper line would continue a multi-line scalar); at
  most 100 blocks deep.
"""

from __future__ import annotations

import re
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
#: a one-line flow collection, loosely: its brackets, separators and scalars are checked by
#: :func:`_skeleton` (no ``#`` outside quotes: after a space it would start a comment)
_FLOW = rf"[\[{{](?:[^\n'\"#]|{_SINGLE}|{_DOUBLE})*[\]}}]"
#: one line: (indentation, dashes, key, value); a comment needs a space (or nothing) before
_LINE = re.compile(
    rf"( *)((?:-(?: |$))*)(?:({_PLAIN}|{_SINGLE}|{_DOUBLE}):(?: +|$))?"
    rf"({_PLAIN}|{_SINGLE}|{_DOUBLE}|{_FLOW})? *(?:(?<![^ ])#.*)?"
)
#: a flow collection's text split into separators and the scalars between them
_SPLIT = re.compile(rf"({_ITEM})")
#: a separator: spaces and brackets and commas, or ``: `` right after a key then those
_SEPARATOR = re.compile(r"(?:: )?[ \[\]{},]*")
_MAX_FLOW_DEPTH = 20
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
        return _Reader(loader).read(text.split("\n"))
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
    if "\r" in text:
        if text.count("\r") != text.count("\r\n"):
            return None  # a carriage return alone is a line break of its own
        # in the subset a line break only ends a line: CR LF and LF read the same
        text = text.replace("\r\n", "\n")
        data = text
    if text.isascii():
        ascii_bytes = data if isinstance(data, bytes) else text.encode("ascii")
        if len(ascii_bytes.translate(None, _CONTROL)) != len(ascii_bytes):
            return None
    elif re.search(_UNSAFE, text) is not None:
        return None
    return text


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


#: a row without a key, or without a value
_ABSENT: Any = object()
#: a row whose value is built anew for each line it is on (a list, a mapping, a timestamp)
_FRESH: Any = object()
#: one line: (column, dashes, key, value or _ABSENT or _FRESH, value text)
_Row = tuple[int, str, Any, Any, str]


class _Rows(dict[str, _Row | None]):
    """Each distinct line's row, read once (None for a blank or comment line): a large
    file repeats most of its lines (``    class: gpu``)."""

    def __init__(self, reader: _Reader) -> None:
        super().__init__()
        self._reader = reader

    def __missing__(self, line: str) -> _Row | None:
        match = _LINE.fullmatch(line)
        if match is None:
            raise _Decline  # a line outside the subset
        indent, dash, key, raw = match.groups()
        row: _Row | None = None
        if dash or key or raw:
            reader = self._reader
            name = _ABSENT if key is None else reader.key(key)
            value = _ABSENT if raw is None else reader.scalar(raw)
            row = (len(indent), dash, name, value, raw)
        self[line] = row
        return row


#: a flow collection: (whether a mapping, its entries); an entry is the index of a scalar
#: or a nested collection, and a mapping's entries alternate its keys and their values
_Tree = tuple[bool, list[Any]]


class _Shape:
    """A flow collection's tree from the separators around its scalars (the first before
    the first scalar, the last after the last one): every entry is ``key: value`` in a
    mapping and a value in a sequence, separated by commas, keys are scalars followed by
    ``: ``; no empty entry, no trailing comma, nothing else."""

    def __init__(self, separators: list[str]) -> None:
        tokens: list[str | int] = []
        last = len(separators) - 1
        for at, separator in enumerate(separators):
            if _SEPARATOR.fullmatch(separator) is None:
                raise _Decline  # a ``?``, ``#``, ``-``, a ``:`` not right after a key ...
            tokens.extend(separator.replace(" ", ""))
            if at < last:
                tokens.append(at)
        self._tokens = tokens
        self._at = 0
        self._keys = [False] * last

    def read(self) -> tuple[_Tree, list[bool]]:
        tree = self._collection(self._next(), 0)
        if self._at != len(self._tokens):
            raise _Decline  # something after the collection's end
        return tree, self._keys

    def _next(self) -> str | int:
        if self._at == len(self._tokens):
            raise _Decline
        token = self._tokens[self._at]
        self._at += 1
        return token

    def _collection(self, opening: str | int, depth: int) -> _Tree:
        if opening not in ("[", "{") or depth > _MAX_FLOW_DEPTH:
            raise _Decline
        mapping = opening == "{"
        closing = "}" if mapping else "]"
        entries: list[Any] = []
        if self._tokens[self._at : self._at + 1] == [closing]:
            self._at += 1
            return mapping, entries
        while True:
            if mapping:
                key = self._next()
                if not isinstance(key, int) or self._next() != ":":
                    raise _Decline  # a key alone, a collection as a key, an empty entry
                self._keys[key] = True
                entries.append(key)
            value = self._next()
            entries.append(value if isinstance(value, int) else self._collection(value, depth + 1))
            after = self._next()
            if after == closing:
                return mapping, entries
            if after != ",":
                raise _Decline  # a pair in a sequence, two scalars in a row
            # a closing bracket after the comma (a trailing comma) is not a value: declined


def _build(tree: _Tree, values: list[Any]) -> Any:
    """A new collection of the tree, with the scalars' values."""
    mapping, entries = tree
    if not mapping:
        return [
            values[entry] if entry.__class__ is int else _build(entry, values) for entry in entries
        ]
    built: dict[Any, Any] = {}
    for at in range(0, len(entries), 2):
        value = entries[at + 1]
        built[values[entries[at]]] = (
            values[value] if value.__class__ is int else _build(value, values)
        )
    return built


class _Reader:
    """One document's rows turned into values: an indentation stack of open blocks."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader
        #: the value of each scalar text seen, or _FRESH
        self._scalars: dict[str, Any] = {}
        #: each flow collection text's tree, its scalars' values, and those built anew
        self._flows: dict[str, tuple[_Tree, list[Any], list[tuple[int, str]]]] = {}
        #: each flow collection skeleton's tree, and which of its scalars are keys
        self._shapes: dict[str, tuple[_Tree, list[bool]]] = {}

    def read(self, lines: list[str]) -> Any:
        root: list[Any] = [None]
        stack: list[tuple[int, Any, bool]] = []
        # the open block: its column, its container, whether a mapping
        col_top, is_map = -1, False
        top: Any = None
        # the value awaiting a nested block: after a bare ``key:`` or ``-``, or the root
        slot: Any = root
        slot_key: Any = 0
        slot_col, slot_is_key = -1, False
        for col, dash, name, value, raw in filter(None, map(_Rows(self).__getitem__, lines)):
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
                if name is not _ABSENT:
                    new = {}
                    top.append(new)
                    stack.append((col_top, top, False))
                    col_top, top, is_map = col_top + 2, new, True
                elif value is _ABSENT:
                    top.append(None)
                    slot, slot_key, slot_col, slot_is_key = top, len(top) - 1, col_top, False
                    continue
                else:
                    top.append(self.fresh(raw) if value is _FRESH else value)
                    continue
            elif name is _ABSENT:
                raise _Decline  # a scalar alone on its line
            elif not is_map:
                # a key after a sequence at its mapping's indentation ends that sequence
                if stack[-1][0] != col or not stack[-1][2]:
                    raise _Decline
                col_top, top, is_map = stack.pop()
            if value is _ABSENT:
                top[name] = None
                slot, slot_key, slot_col, slot_is_key = top, name, col_top, True
            else:
                top[name] = self.fresh(raw) if value is _FRESH else value
        if slot is root:
            raise _Decline  # no block at all: an empty document, or a scalar
        return root[0]

    def _construct(self, tag: str, text: str) -> Any:
        try:
            return self._loader.construct_object(ScalarNode(tag, text), deep=True)
        except Exception:  # PyYAML raises it again, as the user's error
            raise _Decline from None

    def scalar(self, raw: str) -> Any:
        """The value of a scalar text (a value or a flow item), or _FRESH."""
        value = self._scalars.get(raw, _ABSENT)
        if value is not _ABSENT:
            return value
        first = raw[0]
        if first == "'":
            value = raw[1:-1].replace("''", "'")
        elif first == '"':
            value = raw[1:-1]
        elif first in "[{":
            value = _FRESH
        else:
            tag = self._loader.resolve(ScalarNode, raw, (True, False))
            if tag == _STR:
                value = raw
            elif tag in _IMMUTABLE:
                value = self._construct(tag, raw)
            elif tag == _TIMESTAMP:
                self._construct(tag, raw)  # a date that does not exist is PyYAML's error
                value = _FRESH
            else:
                raise _Decline  # merge keys, ``=``, or a resolver someone added
        self._scalars[raw] = value
        return value

    def fresh(self, raw: str) -> Any:
        """A new value for a text whose value is not shared: PyYAML builds each anew."""
        if raw[0] in "[{":
            return self.flow(raw)
        return self._construct(_TIMESTAMP, raw)

    def flow(self, raw: str) -> Any:
        """A new value for a one-line flow collection's text."""
        known = self._flows.get(raw)
        if known is None:
            parts = _SPLIT.split(raw)
            separators, items = parts[0::2], parts[1::2]
            # lines differ in their scalars far more than in their shapes
            skeleton = "\0".join(separators)
            shape = self._shapes.get(skeleton)
            if shape is None:
                shape = self._shapes[skeleton] = _Shape(separators).read()
            tree, keys = shape
            values = [
                self.key(item) if is_key else self.scalar(item)
                for item, is_key in zip(items, keys, strict=True)
            ]
            fresh = [(at, items[at]) for at, value in enumerate(values) if value is _FRESH]
            known = self._flows[raw] = (tree, values, fresh)
        tree, values, fresh = known
        if fresh:
            values = values.copy()
            for at, item in fresh:
                values[at] = self.fresh(item)
        return _build(tree, values)

    def key(self, raw: str) -> Any:
        """The key of a key text: a string, or a number, boolean, null or timestamp (these
        are values: one for all lines with the same text gives the same mapping)."""
        if len(raw) > _MAX_KEY:
            raise _Decline  # PyYAML limits a key to 1024 characters (or bytes) to its ':'
        value = self.scalar(raw)
        if value is _FRESH:
            value = self.fresh(raw)
        try:
            hash(value)
        except TypeError:
            raise _Decline from None  # a constructor someone added built a mutable key
        return value
