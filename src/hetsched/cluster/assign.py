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
    eligible = state.device_mask(choice.device_class, choice.selector)[row]
    free = state.dev_free[row]
    need = SHARE_UNITS if choice.whole else choice.share
    slots: list[int] = (eligible & (free >= need)).nonzero()[0].tolist()
    if taken:
        slots = [s for s in slots if s not in taken]
    if len(slots) < choice.count:
        return None
    if choice.whole:
        return slots[: choice.count]  # whole devices: lowest slots first
    # a fractional request: by free share, ascending (most used first) or descending
    left: list[int] = free.tolist()
    if prefer == "least_used":
        return [min(slots, key=lambda s: (-left[s], s))]
    return [min(slots, key=lambda s: (left[s], s))]


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
        for slot in slots:
            taken.add(slot)
            shares.append(DeviceShare(state.device_id(row, slot), share))
    return tuple(shares)
