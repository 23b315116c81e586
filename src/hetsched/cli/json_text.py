"""``json.dumps(data, indent=2)``, the same text, faster.

With ``indent``, the standard library encodes in pure Python through nested generators
(its C encoder serves only compact output): about 50 ms of a 5,000-job ``hetsched place
-o json``. :func:`dumps_indented` walks plain dicts, lists, strings, numbers, booleans
and None directly and hands strings to the standard library's C escaper; anything else
(another type, a subclass, a key json would refuse, a cycle) goes to ``json.dumps``
itself, so the text and every error are the standard library's.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import Any

__all__ = ["dumps_indented"]

_INF = float("inf")


class _Unusual(Exception):
    """A value the fast walk leaves to ``json.dumps``."""


def dumps_indented(data: Any) -> str:
    """Exactly ``json.dumps(data, indent=2)``."""
    chunks: list[str] = []
    try:
        _value(data, chunks, "\n")
    except (_Unusual, RecursionError):
        return json.dumps(data, indent=2)
    return "".join(chunks)


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value == _INF:
        return "Infinity"
    if value == -_INF:
        return "-Infinity"
    return float.__repr__(value)


def _scalar(value: Any) -> str:
    """A leaf's text; _Unusual for a container or a type json treats otherwise."""
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if kind is float:
        return _float(value)
    raise _Unusual


def _key(key: Any) -> str:
    if type(key) is str:
        return encode_basestring_ascii(key)
    if type(key) is float:
        return encode_basestring_ascii(_float(key))
    if type(key) is int or key is None or key is True or key is False:
        return encode_basestring_ascii(_scalar(key))  # json writes them as strings
    raise _Unusual


def _value(value: Any, chunks: list[str], newline: str) -> None:
    """Append ``value``'s text; ``newline`` is a line break and the current indent."""
    kind = type(value)
    if kind is dict:
        if not value:
            chunks.append("{}")
            return
        inner = newline + "  "
        opening = "{" + inner
        for key, item in value.items():
            chunks.append(opening)
            chunks.append(_key(key))
            chunks.append(": ")
            _item(item, chunks, inner)
            opening = "," + inner
        chunks.append(newline + "}")
    elif kind is list or kind is tuple:
        if not value:
            chunks.append("[]")
            return
        inner = newline + "  "
        opening = "[" + inner
        for item in value:
            chunks.append(opening)
            _item(item, chunks, inner)
            opening = "," + inner
        chunks.append(newline + "]")
    else:
        chunks.append(_scalar(value))


def _item(item: Any, chunks: list[str], newline: str) -> None:
    kind = type(item)
    if kind is str:  # most leaves: no call deeper
        chunks.append(encode_basestring_ascii(item))
    elif kind is int:
        chunks.append(int.__repr__(item))
    else:
        _value(item, chunks, newline)
