"""Indented JSON written piece by piece, for documents too big to build whole.

``write_json(data, write)`` writes exactly ``json.dumps(data, indent=2)`` of ``data`` with
every iterator in it (a generator of per-job rows, say) read as a list, without building
that list or the whole text: each element is encoded and written as the iterator yields
it. Only the dicts and lists that hold an iterator are walked here (their keys must be
strings); everything else goes to :func:`~hetsched.cli.json_text.dumps_indented`
(``json.dumps``'s text and errors).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from json.encoder import encode_basestring_ascii
from typing import Any

from hetsched.cli.json_text import dumps_indented

__all__ = ["write_json"]

_INDENT = "  "


def write_json(data: Any, write: Callable[[str], object]) -> None:
    """Write ``json.dumps(data, indent=2)``, each iterator in ``data`` streamed as a list."""
    _write(data, write, "\n")


def _holds_iterator(value: Any) -> bool:
    if isinstance(value, Iterator):
        return True
    if type(value) is dict:
        return any(_holds_iterator(v) for v in value.values())
    if type(value) is list:
        return any(_holds_iterator(v) for v in value)
    return False


def _write(value: Any, write: Callable[[str], object], newline: str) -> None:
    """Write ``value``; ``newline`` is a line break and the current indent."""

    def element(item: Any, inner: str) -> None:
        _write(item, write, inner)

    def member(pair: tuple[str, Any], inner: str) -> None:
        write(encode_basestring_ascii(pair[0]) + ": ")
        _write(pair[1], write, inner)

    if isinstance(value, Iterator):
        _items(value, write, newline, "[]", element)
    elif type(value) is dict and _holds_iterator(value):
        for key in value:  # checked before anything of the dict is written
            if type(key) is not str:
                raise TypeError(f"a streamed document's keys are strings, got {key!r}")
        _items(iter(value.items()), write, newline, "{}", member)
    elif type(value) is list and _holds_iterator(value):
        _items(iter(value), write, newline, "[]", element)
    else:
        # json.dumps indents a nested value by prefixing each of its lines (a string in
        # JSON text never holds a raw line break)
        write(dumps_indented(value).replace("\n", newline))


def _items(
    items: Iterator[Any],
    write: Callable[[str], object],
    newline: str,
    brackets: str,
    each: Callable[[Any, str], None],
) -> None:
    """Write the opening bracket, the items one per line one level in, the closing one
    (both on one line when there are none, as json.dumps writes an empty container)."""
    opening, closing = brackets[0], brackets[1]
    inner = newline + _INDENT
    empty = True
    for item in items:
        write((opening if empty else ",") + inner)
        each(item, inner)
        empty = False
    write(opening + closing if empty else newline + closing)
