"""Device selectors: CEL expressions in Kubernetes DRA syntax.

``device.attributes["model"] in ["A100", "H100"] && device.attributes["memory_gib"] >= 40``

Expressions are compiled once and evaluated once per distinct device attribute set; a
cluster has few device models, so a selector costs a handful of evaluations however many
nodes there are. An expression that fails at run time on a device (a missing attribute,
a type mismatch) does not match that device, as in DRA.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import celpy

from hetsched.model.device import AttrValue

__all__ = ["AttrKey", "SelectorError", "attr_key", "compile_selector", "matches"]

AttrKey = tuple[tuple[str, AttrValue], ...]

_ENV = celpy.Environment()


class SelectorError(ValueError):
    """A selector that is not valid CEL."""


def attr_key(attributes: Mapping[str, AttrValue]) -> AttrKey:
    """A hashable, order-independent key for an attribute set."""
    return tuple(sorted(attributes.items()))


@lru_cache(maxsize=1024)
def compile_selector(expression: str) -> Any:
    """Compile a CEL expression; raises SelectorError with the parser's message."""
    try:
        return _ENV.program(_ENV.compile(expression))
    except Exception as exc:  # celpy raises several parser error types
        message = " ".join(str(exc).split())
        raise SelectorError(f"invalid selector {expression!r}: {message}") from exc


@lru_cache(maxsize=65536)
def matches(expression: str, attributes: AttrKey) -> bool:
    """Whether a device with ``attributes`` satisfies ``expression``."""
    program = compile_selector(expression)
    activation = celpy.json_to_cel(  # type: ignore[attr-defined]
        {"device": {"attributes": dict(attributes)}}
    )
    try:
        result = program.evaluate(activation)
    except Exception:  # a missing attribute or a type error: no match, as in DRA
        return False
    # A non-boolean result (``1 + 1``) is a type error in DRA: no match.
    return isinstance(result, celpy.celtypes.BoolType) and bool(result)
