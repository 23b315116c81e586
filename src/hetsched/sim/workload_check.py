"""Checks of a workload against a cluster, before a replay: every device class a job asks
for exists, every model its selector names exists, and its selector matches some device.
Each problem is ``FILE:LINE: FIELD: message`` (at most 50)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from hetsched.model.device import Node
from hetsched.model.selector import attr_key, matches
from hetsched.sim.workload import Workload

__all__ = ["check_against_cluster", "selector_models"]

_MAX_ERRORS = 50

_MODEL_IN = re.compile(r"""device\.attributes\[\s*["']model["']\s*\]\s*in\s*\[([^\]]*)\]""")
_MODEL_EQ = re.compile(r"""device\.attributes\[\s*["']model["']\s*\]\s*==\s*["']([^"']*)["']""")
_QUOTED = re.compile(r"""["']([^"']*)["']""")


def selector_models(selector: str) -> list[str]:
    """Device models a selector names (``model in [...]`` or ``model == "..."``)."""
    names: list[str] = []
    for match in _MODEL_IN.finditer(selector):
        names += _QUOTED.findall(match.group(1))
    names += _MODEL_EQ.findall(selector)
    return list(dict.fromkeys(names))


def check_against_cluster(workload: Workload, nodes: Sequence[Node]) -> list[str]:
    """Rows that name what the cluster does not have: an unknown device class, a model a
    selector names that no device of that class has, or a selector no device satisfies.

    Each problem is ``FILE:LINE: FIELD: message``; checks run once per distinct request.
    """
    models: dict[str, set[str]] = {}
    kinds: dict[str, set[tuple[tuple[str, Any], ...]]] = {}
    for node in nodes:
        for device in node.devices:
            models.setdefault(device.device_class, set()).add(device.model)
            kinds.setdefault(device.device_class, set()).add(attr_key(device.selector_view()))
    verdicts: dict[tuple[str, str | None], tuple[str, str] | None] = {}
    errors: list[str] = []
    for item in workload.jobs:
        for request in item.job.resources.devices:
            choice = request.primary
            key = (choice.device_class, choice.selector)
            if key not in verdicts:
                verdicts[key] = _verdict(choice.device_class, choice.selector, models, kinds)
            verdict = verdicts[key]
            if verdict is not None:
                where = f"{workload.source}:{item.line}" if item.line else item.job.id
                errors.append(f"{where}: {verdict[0]}: {verdict[1]}")
        if len(errors) >= _MAX_ERRORS:
            break
    return errors


def _verdict(
    device_class: str,
    selector: str | None,
    models: dict[str, set[str]],
    kinds: dict[str, set[tuple[tuple[str, Any], ...]]],
) -> tuple[str, str] | None:
    if device_class not in models:
        have = ", ".join(sorted(models)) or "none"
        return ("device_class", f"the cluster has no {device_class!r} devices (it has: {have})")
    if selector is None:
        return None
    have_models = sorted(m for m in models[device_class] if m)
    unknown = [m for m in selector_models(selector) if m not in models[device_class]]
    if unknown:
        names = ", ".join(repr(m) for m in unknown)
        return (
            "selector",
            f"unknown {device_class} model {names} (the cluster has: {', '.join(have_models)})",
        )
    if not any(matches(selector, k) for k in kinds[device_class]):
        return ("selector", f"matches no {device_class} device of the cluster: {selector}")
    return None
