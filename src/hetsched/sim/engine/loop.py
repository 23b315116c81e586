"""The engine's one event loop: a virtual clock and its agenda.

Both modes of the engine run on it: the event-driven mode (:mod:`.event_mode`, the
scheduling core fed events) and the round mode (:mod:`.round_mode`, Gavel's rounds). The
agenda is a heap of ``(time, order, seq, payload)``: entries fall due in time, then in the
drivers' order (:class:`hetsched.drivers.EventOrder`), then in the sequence they were
pushed (or an explicit tie-break, such as an arrival's workload index), so a run is a pure
function of what was pushed.

:meth:`EventLoop.run` moves the clock to the earliest time due and hands it to the mode's
step, which takes off the agenda what it delivers at that time (``pop_due``) and pushes what
it causes later. The clock never goes backwards: a step may push only at or after ``now``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["EventLoop", "Step"]

P = TypeVar("P")

#: a mode's step: ``(now) -> go on?``; it must take the entries due at ``now`` off the
#: agenda (else the loop would hand it the same time again)
Step = Callable[[float], bool]


class EventLoop(Generic[P]):
    """The virtual clock (``now``) and the agenda of what falls due when."""

    __slots__ = ("heap", "now", "seq")

    def __init__(self) -> None:
        #: the agenda; modes pop from it directly on their hot path (``heapq`` order)
        self.heap: list[tuple[float, int, int, P]] = []
        self.seq = 0
        self.now = 0.0

    def push(self, time: float, order: int, payload: P) -> None:
        """Put ``payload`` on the agenda at ``time``, after what is already there with the
        same time and order."""
        heapq.heappush(self.heap, (time, order, self.seq, payload))
        self.seq += 1

    def push_keyed(self, time: float, order: int, key: int, payload: P) -> None:
        """Put ``payload`` on the agenda with an explicit tie-break ``key`` (instead of the
        push sequence); keys must not collide with the sequence numbers in use."""
        heapq.heappush(self.heap, (time, order, key, payload))

    def next_time(self) -> float | None:
        """When the earliest entry falls due (None: the agenda is empty)."""
        return self.heap[0][0] if self.heap else None

    def pop_due(self, time: float) -> list[tuple[int, P]]:
        """Take every entry due at ``time`` off the agenda: ``(order, payload)`` in order."""
        heap, due = self.heap, []
        while heap and heap[0][0] == time:
            _, order, _, payload = heapq.heappop(heap)
            due.append((order, payload))
        return due

    def run(self, step: Step, until: float | None = None) -> None:
        """Move the clock from due time to due time, calling ``step`` at each, until the
        agenda is empty, the next time is past ``until``, or ``step`` says stop."""
        heap = self.heap
        while heap:
            time = heap[0][0]
            if until is not None and time > until:
                break
            self.now = time
            if not step(time):
                break
