"""The core's time limits as heaps: maximum runtime of a run, maximum pending time.

A call of the core must not scan every running or waiting job to learn that no limit is
due. Each limit is entered once, when it starts to run (a run starts, a job enters the
queue), with the values it was computed from; an entry whose job moved on since (ended,
requeued, restarted) is dropped when it comes up. Due jobs come out in arrival order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from hetsched.model.lifecycle import JobState
from hetsched.scheduler.records import JobRecord

__all__ = ["Deadlines"]

#: deadlines are sums of floats; an entry is looked at this much early and the exact rule
#: (``now - since >= limit``) decides, so rounding never makes a limit fire late or early
_SLACK = 1e-6


#: does an entry (record, since, run) still apply?
_Check = Callable[[JobRecord, float, int], bool]
#: deadline, arrival order, since, limit, run, record
_Item = tuple[float, int, float, float, int, JobRecord]


@dataclass(slots=True)
class _Limit:
    heap: list[_Item] = field(default_factory=list)

    def add(self, record: JobRecord, since: float, limit: float) -> None:
        heapq.heappush(self.heap, (since + limit, record.seq, since, limit, record.run, record))

    def due(self, now: float, valid: _Check) -> list[tuple[JobRecord, float]]:
        """Entries whose limit has passed at ``now`` and still apply, with their limit."""
        out: dict[str, tuple[JobRecord, float]] = {}
        keep: list[_Item] = []
        heap = self.heap
        while heap and heap[0][0] <= now + _SLACK * max(1.0, abs(now)):
            item = heapq.heappop(heap)
            _, _, since, limit, run, record = item
            if not valid(record, since, run):
                continue
            if now - since >= limit:
                out[record.id] = (record, limit)
            else:
                keep.append(item)
        for item in keep:
            heapq.heappush(heap, item)
        return sorted(out.values(), key=lambda pair: pair[0].seq)

    def next_after(self, now: float, valid: _Check) -> float | None:
        heap = self.heap
        while heap and not valid(heap[0][5], heap[0][2], heap[0][4]):
            heapq.heappop(heap)
        if not heap:
            return None
        if heap[0][0] > now:
            return heap[0][0]
        later = [i[0] for i in heap if i[0] > now and valid(i[5], i[2], i[4])]
        return min(later) if later else None


def _running(record: JobRecord, since: float, run: int) -> bool:
    return record.state is JobState.RUNNING and record.run == run and record.started == since


def _pending(record: JobRecord, since: float, run: int) -> bool:
    return record.state is JobState.PENDING and record.queued_since == since


class Deadlines:
    """Maximum runtime (per run) and maximum pending time (per stay in the queue)."""

    def __init__(self) -> None:
        self._runtime = _Limit()
        self._pending = _Limit()

    def run_started(self, record: JobRecord, limit: float | None) -> None:
        """A run of ``record`` started at ``record.started``, limited to ``limit`` seconds."""
        if limit is not None and record.started is not None:
            self._runtime.add(record, record.started, limit)

    def queued(self, record: JobRecord, limit: float | None) -> None:
        """``record`` entered the queue at ``record.queued_since``."""
        if limit is not None:
            self._pending.add(record, record.queued_since, limit)

    def overrun(self, now: float) -> list[tuple[JobRecord, float]]:
        """Running jobs past their maximum runtime, with it, in arrival order."""
        return self._runtime.due(now, _running)

    def expired(self, now: float) -> list[tuple[JobRecord, float]]:
        """Pending jobs past the maximum pending time, with it, in arrival order."""
        return self._pending.due(now, _pending)

    def next_after(self, now: float) -> float | None:
        """The earliest deadline after ``now``, or None."""
        times = [
            t
            for t in (
                self._runtime.next_after(now, _running),
                self._pending.next_after(now, _pending),
            )
            if t is not None
        ]
        return min(times) if times else None
