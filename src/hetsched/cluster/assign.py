"""Exact device assignment on one node: which slots a task takes.

The vectorized fit filter counts fitting devices per node for each request on its own;
this module makes the exact choice on the node the scorers picked, with requests taken in
order and each device used by at most one request of the task.
"""

from __future__ import annotations

from typing import Literal

from hetsched.cluster.placement import DeviceShare
from hetsched.cluster.state import ClusterState
from hetsched.model.device import SHARE_UNITS
from hetsched.model.job import DeviceChoice, TaskRequest

__all__ = ["DevicePreference", "assign_devices", "choose_slots"]

#: which shared device a fractional request takes: the most used one that still fits
#: (packs shares, keeps whole devices free) or the least used one (spreads load)
DevicePreference = Literal["most_used", "least_used"]


def choose_slots(
    state: ClusterState,
    row: int,
    choice: DeviceChoice,
    taken: set[int],
    prefer: DevicePreference = "most_used",
) -> list[int] | None:
    """Slots of node ``row`` for one device choice, or None if it does not fit there."""
    # plain lists: a node has a handful of slots, where numpy calls cost more than the work
    eligible = _eligible_slots(state, row, choice.device_class, choice.selector)
    left: list[int] = state.dev_free[row].tolist()
    need = SHARE_UNITS if choice.whole else choice.share
    slots = [s for s in eligible if left[s] >= need and s not in taken]
    if len(slots) < choice.count:
        return None
    if choice.whole:
        return slots[: choice.count]  # whole devices: lowest slots first
    # a fractional request: by free share, ascending (most used first) or descending
    if prefer == "least_used":
        return [min(slots, key=lambda s: (-left[s], s))]
    return [min(slots, key=lambda s: (left[s], s))]


def _eligible_slots(
    state: ClusterState, row: int, device_class: str, selector: str | None
) -> list[int]:
    """The slots of ``row`` that ``state.device_mask`` admits, in slot order (a list per
    row, kept like the mask until the topology or health changes)."""
    per_row: dict[int, list[int]] = state.memo(("eligible_slots", device_class, selector), dict)
    slots = per_row.get(row)
    if slots is None:
        slots = per_row[row] = state.device_mask(device_class, selector)[row].nonzero()[0].tolist()
    return slots


def assign_devices(
    state: ClusterState, row: int, request: TaskRequest, prefer: DevicePreference = "most_used"
) -> tuple[DeviceShare, ...] | None:
    """The devices a task takes on node ``row``: per request, its first alternative that fits."""
    taken: set[int] = set()
    shares: list[DeviceShare] = []
    for device_request in request.devices:
        for choice in device_request.choices:
            slots = choose_slots(state, row, choice, taken, prefer)
            if slots is not None:
                break
        else:
            return None
        share = SHARE_UNITS if choice.whole else choice.share
        devices = state.nodes[row].devices  # state.device_id(row, slot), read once per row
        for slot in slots:
            taken.add(slot)
            shares.append(DeviceShare(devices[slot].id, share))
    return tuple(shares)
