"""The waiting queue's data: entries, their sorted sources and lanes, and the merge.

An :class:`Entry` is one waiting job; it is filed in one :class:`Source` of one
:class:`Lane` (see ``hetsched.queueing.waiting`` for which), a list sorted by the job's
static rank in its lane. :func:`merge` walks the lanes in queue order with a heap keyed by
each lane's first job; :func:`count_ahead` counts a queue's jobs ahead of one job. Both
rely on the queue sort's contract (``LanedQueueSort``): within a lane, sort keys never
decrease along the rank.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hetsched.model.job import Job

if TYPE_CHECKING:
    from hetsched.scheduler.records import JobRecord

__all__ = [
    "ACTIVE",
    "Entry",
    "Lane",
    "Shape",
    "ShapeState",
    "Source",
    "count_ahead",
    "merge",
    "rank_of",
]

ACTIVE = "active"
#: (request, best effort, tasks needed at once)
Shape = tuple[Hashable, bool, int]
#: a job's sort key at the cycle's time
SortKey = Callable[["JobRecord"], Any]
#: does a source (by key) matter to the cycle now
Relevant = Callable[[tuple[Hashable, ...]], bool]


@dataclass(slots=True, eq=False)
class ShapeState:
    """The jobs of one shape that wait for room."""

    key: Shape
    #: a job of the shape, for the feasibility check's context
    sample: Job
    #: growth mark at the last failure (or no-room check): only rows grown since may help
    mark: int = -1
    #: capacity epoch of that failure or check; a shape is closed while it is current
    epoch: int = -1
    #: room appeared at the start of this cycle and no job of the shape failed since
    open: bool = False
    members: int = 0


@dataclass(slots=True, eq=False)
class Source:
    key: tuple[Hashable, ...]
    lane: Lane
    items: list[Entry] = field(default_factory=list)
    cursor: int = 0


@dataclass(slots=True, eq=False)
class Lane:
    key: Hashable
    queue: str
    running: bool
    number: int
    sources: dict[tuple[Hashable, ...], Source] = field(default_factory=dict)
    #: per cycle: (rank, source number, source) of each relevant source's next job
    heap: list[tuple[tuple[Hashable, ...], int, Source]] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class Entry:
    record: JobRecord
    kind: str = ACTIVE
    shape: ShapeState | None = None
    #: EPOCH: the capacity epoch of the failure; TOPOLOGY: the cluster version
    epoch: int = -1
    version: int = -1
    #: where it is filed now (None until the next flush files it)
    source: Source | None = None
    rank: tuple[Hashable, ...] = ()
    #: re-entered the queue during the running cycle: not tried again in it
    fresh: bool = False
    removed: bool = False
    #: strict queues: the head the job was told blocks its queue (its explanation says so)
    told: str | None = None


def rank_of(entry: Entry) -> tuple[Hashable, ...]:
    return entry.rank


def merge(lanes: Iterable[Lane], key: SortKey, relevant: Relevant) -> Iterator[Entry]:
    """The entries of the relevant sources of ``lanes``, in queue order.

    ``relevant(source key)`` is asked again as the walk goes (after each yield the caller
    may have changed what matters); a source that stops mattering never matters again
    within the walk. Keys are read again after each yield, so a key that grew (a share
    after a bind) counts; a stale heap entry is refreshed when it comes up, which is exact
    because keys only grow within a cycle.
    """
    heap: list[tuple[Any, int, Lane]] = []
    for lane in lanes:
        lane.heap = []
        for number, source in enumerate(lane.sources.values()):
            source.cursor = 0
            if source.items and relevant(source.key):
                lane.heap.append((source.items[0].rank, number, source))
        heapq.heapify(lane.heap)
        head = _head(lane, relevant)
        if head is not None:
            heap.append((key(head.record), lane.number, lane))
    heapq.heapify(heap)
    while heap:
        stale, number, lane = heap[0]
        head = _head(lane, relevant)
        if head is None:
            heapq.heappop(heap)
            continue
        fresh = key(head.record)
        if fresh != stale:
            heapq.heapreplace(heap, (fresh, number, lane))
            continue
        _advance(lane)
        yield head
        following = _head(lane, relevant)
        if following is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (key(following.record), number, lane))


def _head(lane: Lane, relevant: Relevant) -> Entry | None:
    while lane.heap:
        source = lane.heap[0][2]
        if relevant(source.key):
            return source.items[source.cursor]
        heapq.heappop(lane.heap)
    return None


def _advance(lane: Lane) -> None:
    _, number, source = lane.heap[0]
    source.cursor += 1
    if source.cursor < len(source.items):
        heapq.heapreplace(lane.heap, (source.items[source.cursor].rank, number, source))
    else:
        heapq.heappop(lane.heap)


def count_ahead(lanes: Iterable[Lane], key: SortKey, record: JobRecord) -> int:
    """How many entries of ``lanes`` have a smaller key than ``record`` now."""
    mine = key(record)

    def of(entry: Entry) -> Any:
        return key(entry.record)

    ahead = 0
    for lane in lanes:
        for source in lane.sources.values():
            items = source.items
            # keys grow along a source: most are wholly ahead or wholly behind
            if of(items[-1]) < mine:
                ahead += len(items)
            elif of(items[0]) < mine:
                ahead += bisect_left(items, mine, 1, len(items) - 1, key=of)
    return ahead
