"""The value notations of spec files: durations (``90s``, ``2h``), work (``1.2e6`` steps or
``2h@V100``), speed maps (``A100:3.1;V100:1``) and quantities (``500m``, ``16Gi``), each
read into its value or a ValueError that becomes a field error of the model using it."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator

from hetsched.model.quantity import QuantityError, parse_cpu, parse_memory
from hetsched.model.speed import DEFAULT_KEY, NO_SPEED, JobSpeed, SpeedError

__all__ = [
    "Cpu",
    "Memory",
    "build_speed",
    "cpu_value",
    "memory_value",
    "parse_duration",
    "parse_speed_map",
    "parse_work",
]


_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: str | int | float) -> float:
    """Seconds from ``90``, ``"90s"``, ``"30m"``, ``"2h"``, ``"1d"``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"must not be negative, got {value}")
        return float(value)
    match = _DURATION.match(value)
    if match is None:
        raise ValueError(f"not a duration: {value!r} (expected e.g. 90, 90s, 30m, 2h)")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


_NUMBER = re.compile(r"^\s*[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?\s*$")


def parse_work(value: str | int | float) -> tuple[float | None, float | None, str | None]:
    """(steps, seconds, model) from ``1.2e6`` (steps), ``2h@V100`` (two hours on a V100)
    or ``2h`` (two hours on any model: only for jobs without speeds)."""
    if isinstance(value, bool):
        raise ValueError(f"expected work in steps or DURATION@MODEL, got {value!r}")
    if isinstance(value, int | float):
        if not value > 0 or value == float("inf"):
            raise ValueError(f"work must be > 0, got {value}")
        return float(value), None, None
    text = value.strip()
    if _NUMBER.match(text):
        return parse_work(float(text))
    duration, at, model = text.partition("@")
    if at and not model.strip():
        raise ValueError(f"work {value!r}: no model after '@' (expected e.g. 2h@V100)")
    try:
        seconds = parse_duration(duration.strip())
    except ValueError:
        raise ValueError(
            f"work {value!r}: expected steps (1.2e6) or a duration on a model (2h@V100)"
        ) from None
    if seconds <= 0:
        raise ValueError(f"work {value!r}: the duration must be > 0")
    return None, seconds, (model.strip() or None)


def parse_speed_map(value: Any) -> dict[str, float]:
    """Device model -> rate from a mapping or ``A100:3.1;V100:1`` (``;``, ``,`` or spaces
    between entries); rates finite and >= 0, at least one above 0, no model twice."""
    if isinstance(value, str):
        entries: dict[str, Any] = {}
        for part in re.split(r"[;,\s]+", value.strip()):
            if not part:
                continue
            model, sep, rate = part.replace("=", ":").partition(":")
            if not sep or not model:
                raise ValueError(f"speed entry {part!r}: expected MODEL:RATE")
            entries[model] = rate
        value = entries
    if not isinstance(value, dict):
        raise ValueError(f"expected a map of device model to rate, got {value!r}")
    out: dict[str, float] = {}
    seen: dict[str, str] = {}
    for model, raw in value.items():
        name = str(model).strip()
        if not name:
            raise ValueError("a device model name is empty")
        try:
            rate = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: rate must be a number, got {raw!r}") from None
        if isinstance(raw, bool) or not (rate >= 0 and rate != float("inf")):
            raise ValueError(f"{name}: rate must be finite and >= 0, got {raw!r}")
        folded = name.casefold()
        if folded in seen:
            raise ValueError(f"model {name!r} appears twice (as {seen[folded]!r})")
        seen[folded] = name
        out[name] = rate
    if not out:
        raise ValueError("a speed map needs at least one model")
    if all(r == 0 for r in out.values()):
        raise ValueError("a speed map needs at least one rate above 0")
    return out


def build_speed(
    speed: dict[str, float] | None,
    work: tuple[float | None, float | None, str | None] | None,
    job_type: str | None,
) -> JobSpeed:
    """The JobSpeed of a spec's ``speed``, ``work`` and ``job_type``; ValueError naming
    what does not fit together."""
    if not speed and work is None and job_type is None:
        return NO_SPEED  # most jobs say nothing about speed: one shared, immutable value
    steps, seconds, model = work if work is not None else (None, None, None)
    listed = {m.casefold() for m in speed or {}}
    if (
        model is not None
        and listed
        and DEFAULT_KEY not in listed
        and model.casefold() not in listed
    ):
        raise ValueError(f"work is a duration on {model}, which the speed map does not list")
    try:
        return JobSpeed(speed or {}, job_type, steps, seconds, model)
    except SpeedError as exc:
        raise ValueError(str(exc)) from None


def cpu_value(value: Any) -> int:
    """Millicores of a quantity; ValueError (a field error) when it is not one."""
    try:
        return parse_cpu(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None


def memory_value(value: Any) -> int:
    """MiB of a quantity; ValueError (a field error) when it is not one."""
    try:
        return parse_memory(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None


#: a model field of CPU: ``500m``, ``2``, ``1.5`` in, millicores out
Cpu = Annotated[int, BeforeValidator(cpu_value)]
#: a model field of memory: ``16Gi``, ``512Mi``, a number of bytes in, MiB out
Memory = Annotated[int, BeforeValidator(memory_value)]
