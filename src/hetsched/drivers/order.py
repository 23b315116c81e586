"""The one order in which a driver hands the core events that happen at the same time.

Determinism across drivers rests on it: the same events in the same order give the same
actions, so every driver (the simulator, the service, the Kubernetes scheduler, tests)
sorts a batch with :func:`in_order` before ``Scheduler.handle``. The order is:

1. task reports (finished, stopped, start failed, checkpointed): what ran ends before
   anything else is decided, so the capacity it frees is seen by the same cycle;
2. cluster changes (nodes and devices added, removed, healthy or not);
3. cancellations;
4. arrivals (submissions);
5. ticks.

Within one class, events keep the order the driver received them in.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from hetsched.scheduler import events as ev

__all__ = ["EventOrder", "in_order", "order_of"]


class EventOrder(enum.IntEnum):
    """Rank of an event in a batch: lower goes first."""

    REPORT = 0
    CLUSTER = 1
    CANCEL = 2
    ARRIVAL = 3
    TICK = 4


_RANKS: dict[type, EventOrder] = {
    **dict.fromkeys(
        (ev.TaskFinished, ev.TaskStopped, ev.StartFailed, ev.TaskCheckpointed), EventOrder.REPORT
    ),
    **dict.fromkeys(
        (ev.NodeAdded, ev.NodeRemoved, ev.NodeChanged, ev.DeviceHealthChanged, ev.DeviceAdded),
        EventOrder.CLUSTER,
    ),
    ev.JobCancelled: EventOrder.CANCEL,
    ev.JobSubmitted: EventOrder.ARRIVAL,
    ev.Tick: EventOrder.TICK,
}


def order_of(event: ev.Event) -> EventOrder:
    """The rank of ``event`` in a batch."""
    try:
        return _RANKS[type(event)]
    except KeyError:
        raise TypeError(f"not a core event: {event!r}") from None


def in_order(events: Iterable[ev.Event]) -> list[ev.Event]:
    """``events`` sorted by :func:`order_of`, stable within a rank."""
    return sorted(events, key=order_of)
