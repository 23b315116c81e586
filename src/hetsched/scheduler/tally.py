"""The core's running counts: live jobs by queue and state, each queue's longest-waiting
pending job, and the task shapes live jobs ask for, kept as jobs move.

A driver asks these between calls (a service's dashboard and metrics, its loop after every
turn) and must not pay for them with a scan of every live job: with a standing backlog of
tens of thousands of pending jobs such a scan cost more than the cycle itself. The book of
jobs tells the tally when a job enters the live set, when it changes state, and when it
enters the queue; every answer is read from counters and heaps.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field

from hetsched.model.device import SHARE_UNITS
from hetsched.model.job import Job, TaskRequest
from hetsched.model.lifecycle import TERMINAL, JobState
from hetsched.scheduler.records import JobRecord

__all__ = ["Shape", "Tally", "shapes_of"]

#: a task shape a job asks of one device class: (cpu millicores, devices, share of each
#: device in milli-units, selector); a request for several devices counts whole devices
Shape = tuple[int, int, int, str | None]

#: (queued since, arrival order, record): an entry of a queue's age heap
_AgeItem = tuple[float, int, JobRecord]


def shapes_of(job: Job) -> dict[str, Shape]:
    """Device class -> the shape of the job's first device request of that class."""
    resources = job.resources
    out: dict[str, Shape] = {}
    for request in resources.devices:
        choice = request.primary
        if choice.device_class in out:
            continue
        share = choice.share if choice.count == 1 else SHARE_UNITS
        out[choice.device_class] = (resources.cpu_milli, choice.count, share, choice.selector)
    return out


@dataclass(slots=True)
class _Ages:
    """One queue's pending jobs by when they entered the queue. Entries of jobs that left
    the queue (started, ended) or entered it again since are dropped when they come up, and
    the heap is rebuilt when they outnumber the jobs that wait, so it holds at most about
    twice as many entries as the queue has pending jobs."""

    heap: list[_AgeItem] = field(default_factory=list)

    def add(self, record: JobRecord) -> None:
        heapq.heappush(self.heap, (record.queued_since, record.seq, record))

    def oldest(self) -> float | None:
        heap = self.heap
        while heap and not _waits(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def compact(self, pending: int) -> None:
        if len(self.heap) > 2 * pending + 64:
            self.heap = [item for item in self.heap if _waits(item)]
            heapq.heapify(self.heap)


def _waits(item: _AgeItem) -> bool:
    since, _seq, record = item
    return record.state is JobState.PENDING and record.queued_since == since


class Tally:
    """Counts of the live jobs (see the module docstring)."""

    def __init__(self) -> None:
        self._by_state: Counter[tuple[str, JobState]] = Counter()
        self._running = 0
        self._ages: dict[str, _Ages] = {}
        #: device class -> task shape -> tasks of live jobs that ask for it
        self._shapes: dict[str, Counter[Shape]] = {}
        #: request -> shapes_of a job asking it (requests are few, immutable, and jobs
        #: share them): read as each job enters and leaves
        self._request_shapes: dict[TaskRequest, dict[str, Shape]] = {}

    def _shapes_of(self, job: Job) -> dict[str, Shape]:
        """:func:`shapes_of`, kept per request (read-only)."""
        shapes = self._request_shapes.get(job.resources)
        if shapes is None:
            shapes = self._request_shapes[job.resources] = shapes_of(job)
        return shapes

    # -- what the book tells it ----------------------------------------------------------

    def entered(self, record: JobRecord) -> None:
        """``record`` joined the live jobs (submitted, or restored running)."""
        assert record.state is not None and record.state not in TERMINAL
        self._count(record.job.queue, record.state, 1)
        for device_class, shape in self._shapes_of(record.job).items():
            shapes = self._shapes.get(device_class)
            if shapes is None:  # not setdefault: a Counter made per call costs a microsecond
                shapes = self._shapes[device_class] = Counter()
            shapes[shape] += record.job.replicas

    def moved(self, record: JobRecord, source: JobState, target: JobState) -> None:
        """A live job moved from ``source`` to ``target`` (it left if ``target`` is terminal)."""
        queue = record.job.queue
        self._count(queue, source, -1)
        if target in TERMINAL:
            job = record.job
            for device_class, shape in self._shapes_of(job).items():
                shapes = self._shapes[device_class]
                shapes[shape] -= job.replicas
                if shapes[shape] <= 0:
                    del shapes[shape]
        else:
            self._count(queue, target, 1)

    def queued(self, record: JobRecord) -> None:
        """A pending job entered its queue at ``record.queued_since``."""
        queue = record.job.queue
        ages = self._ages.get(queue)
        if ages is None:
            ages = self._ages[queue] = _Ages()
        ages.add(record)
        ages.compact(self._by_state[(queue, JobState.PENDING)])

    def _count(self, queue: str, state: JobState, delta: int) -> None:
        key = (queue, state)
        left = self._by_state[key] + delta
        if left:
            self._by_state[key] = left
        else:
            del self._by_state[key]
        if state is JobState.RUNNING:
            self._running += delta

    # -- answers ---------------------------------------------------------------------------

    def counts(self) -> tuple[Counter[str], int]:
        """Pending jobs per queue (queues with none left out), and running jobs."""
        pending: Counter[str] = Counter()
        for (queue, state), n in self._by_state.items():
            if state is JobState.PENDING:
                pending[queue] = n
        return pending, self._running

    def oldest_pending(self, now: float) -> dict[str, float]:
        """Per queue with pending jobs, how long its longest-waiting one has waited."""
        out: dict[str, float] = {}
        for queue, ages in self._ages.items():
            since = ages.oldest()
            if since is not None:
                out[queue] = max(0.0, now - since)
        return out

    def shapes(self, device_class: str) -> Counter[Shape]:
        """Task shape -> tasks of live jobs whose first request of ``device_class`` it is."""
        return Counter(self._shapes.get(device_class, {}))
