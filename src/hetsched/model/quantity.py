"""Quantities in Kubernetes notation, parsed once at the boundary into integers.

CPU is held as millicores (``"500m"`` -> 500, ``"2"`` -> 2000) and memory as MiB
(``"16Gi"`` -> 16384, ``"512Mi"`` -> 512, ``"1G"`` -> 954). The core never sees a string.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache

__all__ = ["QuantityError", "format_cpu", "format_memory", "parse_cpu", "parse_memory"]

_MIB = 1 << 20
_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_PATTERN = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?\s*([A-Za-z]*)\s*$")


class QuantityError(ValueError):
    """A quantity string that is not valid Kubernetes notation, or is negative."""


def _to_decimal(value: str | int | float) -> Decimal:
    """Return the quantity in base units (cores, bytes) as an exact Decimal."""
    if isinstance(value, bool):
        raise QuantityError(f"expected a quantity, got {value!r}")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise QuantityError(f"expected a finite quantity, got {value!r}")
        if value < 0:
            raise QuantityError(f"must not be negative, got {value!r}")
        return Decimal(str(value))
    if not isinstance(value, str):  # null, a list, a map: a spec file can hold anything
        raise QuantityError(f"expected a quantity, got {value!r}")
    match = _PATTERN.match(value)
    if match is None:
        raise QuantityError(f"not a quantity: {value!r} (expected e.g. 500m, 2, 16Gi)")
    number, exponent, suffix = match.groups()
    try:
        amount = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only digits
        raise QuantityError(f"not a quantity: {value!r}") from exc
    if exponent is not None:
        amount = amount.scaleb(int(exponent))
    if suffix in _BINARY:
        return amount * _BINARY[suffix]
    if suffix in _DECIMAL:
        return amount * _DECIMAL[suffix]
    raise QuantityError(
        f"unknown suffix {suffix!r} in {value!r} (expected m, k, M, G, Ki, Mi, Gi, ...)"
    )


def parse_cpu(value: str | int | float) -> int:
    """CPU in millicores; fractions of a millicore round up, as Kubernetes does."""
    if type(value) is str:
        return _cpu_text(value)
    return _cpu(value)


def parse_memory(value: str | int | float) -> int:
    """Memory in MiB; a plain number is bytes, and partial MiB round up."""
    if type(value) is str:
        return _memory_text(value)
    return _memory(value)


def _cpu(value: str | int | float) -> int:
    cores = _to_decimal(value)
    return int((cores * 1000).to_integral_value(rounding="ROUND_CEILING"))


def _memory(value: str | int | float) -> int:
    amount = _to_decimal(value)
    return int((amount / _MIB).to_integral_value(rounding="ROUND_CEILING"))


# A spec file repeats few distinct quantities ("4", "16Gi") thousands of times: each text
# is parsed once (an invalid one raises every time: exceptions are not cached).
_cpu_text = lru_cache(maxsize=4096)(_cpu)
_memory_text = lru_cache(maxsize=4096)(_memory)


def format_cpu(milli: int) -> str:
    """Millicores back to the shortest Kubernetes form (``2000`` -> ``"2"``)."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_memory(mib: int) -> str:
    """MiB back to the shortest binary-suffixed form (``16384`` -> ``"16Gi"``)."""
    for suffix, size in (("Ti", 1 << 20), ("Gi", 1 << 10)):
        if mib and mib % size == 0:
            return f"{mib // size}{suffix}"
    return f"{mib}Mi"
