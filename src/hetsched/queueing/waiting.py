"""The waiting queue: an index of the jobs with tasks to place, kept between cycles.

A cycle must not cost more as the backlog grows. So the queue keeps, for every waiting job,
*why it waits* and *where it stands*, and a cycle reads only the jobs it will try:

- **Lanes.** A laned queue sort (:class:`~hetsched.framework.interfaces.LanedQueueSort`)
  puts each job in a lane (a user's or queue's jobs for drf and fairshare, a priority class
  for priority, one lane for fifo; split further by leaf queue and by running / pending)
  where jobs keep a static order (``rank``). A cycle merges lanes with a heap keyed by the
  sort key of each lane's first job, so an entity's key (a dominant share) is computed once
  per change, not once per job, and aging stays exact: the keys of two lanes' heads are
  compared at ``now``.
- **Sources.** Within a lane, jobs are filed by why they wait, each kind in its own sorted
  list: ``active`` (to be tried), ``room`` per request shape (failed for capacity),
  ``epoch`` (failed otherwise; tried again when capacity is freed), ``topology`` (no node
  could ever hold it; tried again when nodes or health change), ``nominated`` (waits for
  its preemption victims) and ``backoff`` (after a gang timeout). A cycle merges only the
  sources that can matter to it, so a job that cannot start costs nothing per cycle.
- **Shapes.** Jobs that failed for capacity wait per *shape*: the request, best-effort or
  not, and the tasks needed at once. At the start of a cycle each shape whose capacity
  epoch is stale is checked once: can a node that grew since the shape last failed hold
  one task now? If not, all of its jobs sit the cycle out; if so, they are tried in order
  until one of them fails for capacity, which closes the shape for the rest of the cycle
  (capacity only shrinks within a cycle).

What a waiting job needs (tasks at once, its shape) and when moving running jobs may help
it are in ``hetsched.queueing.needs``. The rules are the cycle's
(``hetsched.scheduler.cycle``); this module only answers "is this
job parked" (:meth:`WaitingQueue.parked`) and "which jobs, in which order, may matter"
(:meth:`WaitingQueue.order`). The full-sort reference cycle asks the first question of every
job and must take the same decisions: a hypothesis property checks it.

Structural changes are deferred while a cycle runs (its merge walks the sorted lists), and
applied by :meth:`WaitingQueue.flush`; the core flushes before every read.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from hetsched.framework.cycle import CycleContext
from hetsched.framework.interfaces import LanedQueueSort
from hetsched.framework.status import PluginError
from hetsched.model.lifecycle import JobState
from hetsched.queueing.lanes import (
    ACTIVE,
    Entry,
    Lane,
    Shape,
    ShapeState,
    Source,
    count_ahead,
    merge,
    rank_of,
)
from hetsched.queueing.needs import (
    PREEMPTION_RETRY_S,
    QueueOwner,
    moves_may_help,
    needed,
    preemption_may_help,
    shape_of,
)

if TYPE_CHECKING:
    from hetsched.scheduler.records import JobRecord

__all__ = [
    "PREEMPTION_RETRY_S",
    "QueueOwner",
    "Shape",
    "WaitingQueue",
    "moves_may_help",
    "needed",
    "preemption_may_help",
    "shape_of",
]


ROOM = "room"
EPOCH = "epoch"
TOPOLOGY = "topology"
TOLD = "told"
_NOMINATED = ("nominated",)
#: a checkpointable job whose earlier run has not stopped yet (it resumes after it)
_STOPPING = ("stopping",)
_BACKOFF = ("backoff",)
_ACTIVE = (ACTIVE,)
#: blocked_by values that make a parked job the backfill head when it comes first
_HEADISH = ("capacity", "gang")


class WaitingQueue:
    """The waiting jobs of one core. See the module docstring."""

    def __init__(self, sched: QueueOwner) -> None:
        self._sched = sched
        plugin = sched.framework.queue_sort
        self._laned: LanedQueueSort | None = plugin if isinstance(plugin, LanedQueueSort) else None
        self._entries: dict[str, Entry] = {}
        self._lanes: dict[tuple[Hashable, str, bool], Lane] = {}
        self._lanes_of_queue: dict[str, list[Lane]] = {}
        self._shapes: dict[Shape, ShapeState] = {}
        self._dirty: dict[str, Entry] = {}
        #: (time, order, job id): backoff ends and preemption retries, to re-file jobs then
        self._timed: list[tuple[float, int, str]] = []
        self._order = 0
        self._in_cycle = False
        self._now = 0.0
        #: pending jobs per leaf queue (the dashboard's counts)
        self._pending: dict[str, int] = {}

    @property
    def laned(self) -> bool:
        """The queue sort keeps lanes: cycles can merge instead of sorting everything."""
        return self._laned is not None

    # -- membership ----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._entries

    def records(self) -> list[JobRecord]:
        """Every waiting job, in arrival order."""
        return sorted((e.record for e in self._entries.values()), key=lambda r: r.seq)

    def pending(self, queue: str | None = None) -> int:
        """Pending jobs waiting (running jobs with tasks still to place are not counted),
        in one leaf queue or all."""
        self.flush()
        if queue is None:
            return sum(self._pending.values())
        return self._pending.get(queue, 0)

    def add(self, record: JobRecord) -> None:
        """A job (re-)enters the queue with nothing known against it: submission, requeue,
        restore, a gang timeout, or a bind that left it tasks to place."""
        entry = self._entries.get(record.id)
        if entry is None:
            # removed since the last flush: the same entry comes back (it may still be filed)
            entry = self._dirty.get(record.id) or Entry(record)
            self._entries[record.id] = entry
        if self._in_cycle:
            entry.fresh = True
        entry.removed = False
        entry.told = None
        self._set_kind(entry, ACTIVE)
        self._dirty[record.id] = entry

    def remove(self, record: JobRecord) -> None:
        """The job has nothing left to place (it runs whole, or ended)."""
        entry = self._entries.pop(record.id, None)
        if entry is not None:
            entry.removed = True
            self._set_kind(entry, ACTIVE)
            self._dirty[record.id] = entry

    def touch(self, record: JobRecord) -> None:
        """Something the filing depends on changed (nominated victims, backoff, a promise,
        a hold): file the job again at the next flush."""
        entry = self._entries.get(record.id)
        if entry is not None:
            self._dirty[record.id] = entry

    def told(self, record: JobRecord, head: str) -> None:
        """A strict queue's job was told that ``head`` blocks its queue: while the same
        head blocks it, a cycle has nothing to tell it again (nor to try)."""
        entry = self._entries.get(record.id)
        if entry is not None and entry.told != head:
            entry.told = head
            self._dirty[record.id] = entry

    def failed(self, record: JobRecord, kind: str) -> None:
        """The job's attempt failed with ``kind`` (its blocked_by): park it by why.

        A failure for capacity closes the job's shape for the rest of the cycle, and marks
        where the growth log stood: only rows grown since can give a job of the shape room.
        """
        entry = self._entries.get(record.id)
        if entry is None:
            return
        entry.told = None
        sched = self._sched
        if kind == "capacity" and not record.job.groups:  # groups: no one shape, by epoch
            member = not record.held and not record.promised
            shape = self._shape(record) if member else self._shapes.get(shape_of(record))
            if shape is not None:
                shape.mark = sched.state.growth_mark()
                shape.epoch = sched.capacity_epoch
                shape.open = False
            if member:
                self._set_kind(entry, ROOM, shape)
                self._dirty[record.id] = entry
                return
        if kind == "unresolvable":
            self._set_kind(entry, TOPOLOGY)
            entry.version = sched.state.version
        else:
            self._set_kind(entry, EPOCH)
            entry.epoch = sched.capacity_epoch
        self._dirty[record.id] = entry

    def _shape(self, record: JobRecord) -> ShapeState:
        key = shape_of(record)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = ShapeState(key, record.job)
        return shape

    def _set_kind(self, entry: Entry, kind: str, shape: ShapeState | None = None) -> None:
        if shape is not None:
            shape.members += 1
        old = entry.shape
        if old is not None:
            old.members -= 1
            if old.members == 0:
                del self._shapes[old.key]
        entry.kind = kind
        entry.shape = shape

    # -- the rule ------------------------------------------------------------------------

    def parked(self, record: JobRecord) -> bool:
        """Nothing the job waits for has happened: it sits this cycle out (unless a strict
        queue, backoff, victims or a preemption retry decide first; see the cycle)."""
        entry = self._entries[record.id]
        if entry.kind == ACTIVE:
            return False
        if entry.kind == ROOM:
            assert entry.shape is not None
            return not entry.shape.open
        if entry.kind == EPOCH:
            return entry.epoch == self._sched.capacity_epoch
        return entry.version == self._sched.state.version

    def is_fresh(self, record: JobRecord) -> bool:
        """The job re-entered the queue during this cycle (a preempted victim): a cycle
        tries only the jobs that waited when it began."""
        entry = self._entries.get(record.id)
        return entry is None or entry.fresh or entry.removed

    # -- cycles --------------------------------------------------------------------------

    def begin_cycle(self, now: float) -> None:
        """File what changed, wake jobs whose backoff or retry time came, and check each
        shape that waits for room once: room appeared, or its jobs sit this cycle out."""
        self._now = now
        timed = self._timed
        while timed and timed[0][0] <= now:
            _, _, job_id = heapq.heappop(timed)
            record = self._sched.jobs.get(job_id)  # None: it ended and was forgotten
            if record is not None:
                self.touch(record)
        self.flush()
        sched = self._sched
        epoch = sched.capacity_epoch
        for shape in self._shapes.values():
            shape.open = False
            if shape.epoch != epoch:
                if self._room(shape, now):
                    shape.open = True
                else:
                    shape.epoch = epoch
                    shape.mark = sched.state.growth_mark()
        self._in_cycle = True

    def end_cycle(self) -> None:
        self._in_cycle = False
        for shape in self._shapes.values():
            shape.open = False
        self.flush()

    def _room(self, shape: ShapeState, now: float) -> bool:
        """Can a node whose free capacity grew since the shape's mark hold one task now?
        Every other node has at most the room it had when a job of the shape failed."""
        state = self._sched.state
        rows = state.grown_since(shape.mark)
        if not rows:
            return False
        candidates = np.zeros(len(state), np.bool_)
        candidates[rows] = True
        candidates &= state.active
        if not candidates.any():
            return False
        ctx = CycleContext(state, shape.sample, shape.sample.resources, now)
        try:
            return bool(self._sched.framework.feasible(ctx, candidates).any())
        except PluginError:
            return True  # the jobs of the shape are tried, and their attempts say what failed

    def order(self, relevant: Callable[[tuple[Hashable, ...]], bool]) -> Iterator[JobRecord]:
        """The waiting jobs a cycle must visit, in queue order: the lanes merged (see
        :func:`~hetsched.queueing.lanes.merge`), without the jobs that re-entered the queue
        during the cycle."""
        assert self._laned is not None
        framework, now = self._sched.framework, self._now
        for entry in merge(self._lanes.values(), lambda r: framework.sort_key(r, now), relevant):
            if not (entry.fresh or entry.removed):
                yield entry.record

    # -- filing --------------------------------------------------------------------------

    def flush(self) -> None:
        """File every job whose filing may have changed (never while a cycle merges)."""
        if self._in_cycle or not self._dirty:
            return
        dirty, self._dirty = self._dirty, {}
        for entry in dirty.values():
            self._file(entry)

    def _file(self, entry: Entry) -> None:
        record = entry.record
        old = entry.source
        if entry.removed:
            if old is not None:
                self._unfile(entry, old)
            return
        entry.fresh = False
        pending = record.state is JobState.PENDING
        lane_key: Any = self._laned.lane(record) if self._laned is not None else ()
        rank = self._laned.rank(record) if self._laned is not None else (record.seq,)
        lane = self._lane((lane_key, record.job.queue, not pending))
        key = self._source_key(entry)
        if old is not None and old.lane is lane and old.key == key and entry.rank == rank:
            return
        if old is not None:
            self._unfile(entry, old)
        source = lane.sources.get(key)
        if source is None:
            source = lane.sources[key] = Source(key, lane)
        entry.rank = rank
        items = source.items
        if not items or not rank < items[-1].rank:
            items.append(entry)  # where insort puts it: jobs mostly arrive in rank order
        else:
            insort(items, entry, key=rank_of)
        entry.source = source
        if pending:
            self._pending[record.job.queue] = self._pending.get(record.job.queue, 0) + 1
        self._schedule(entry, key)

    def _unfile(self, entry: Entry, source: Source) -> None:
        items = source.items
        # the head first: jobs mostly leave in queue order
        index = 0 if items[0] is entry else bisect_left(items, entry.rank, key=rank_of)
        while items[index] is not entry:
            index += 1
        del items[index]
        if not items:
            del source.lane.sources[source.key]
        if not source.lane.running:
            queue = source.lane.queue
            self._pending[queue] -= 1
        entry.source = None

    def _lane(self, key: tuple[Hashable, str, bool]) -> Lane:
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = Lane(key[0], key[1], key[2], len(self._lanes))
            self._lanes_of_queue.setdefault(key[1], []).append(lane)
        return lane

    def _source_key(self, entry: Entry) -> tuple[Hashable, ...]:
        """Where a job is filed; the same precedence as the cycle's checks."""
        record = entry.record
        now = self._sched.now
        if entry.told is not None:
            return (TOLD, record.job.queue, entry.told)
        if record.nominated:
            return _NOMINATED
        if record.waits_for_stop:
            return _STOPPING
        if now < record.backoff_until:
            return _BACKOFF
        if entry.kind == ACTIVE or preemption_may_help(self._sched, record, now):
            return _ACTIVE
        if entry.kind == ROOM:
            return (ROOM, entry.shape)
        if entry.kind == EPOCH:
            return (EPOCH, entry.epoch, record.blocked_by in _HEADISH)
        return (TOPOLOGY, entry.version)

    def _schedule(self, entry: Entry, key: tuple[Hashable, ...]) -> None:
        """Come back to the job when time alone changes its filing."""
        record = entry.record
        at: float | None = None
        if key is _BACKOFF:
            at = record.backoff_until
        elif (
            key is not _ACTIVE
            and key is not _NOMINATED
            and key is not _STOPPING
            and moves_may_help(self._sched)
            and record.state is JobState.PENDING
            and record.blocked_by in ("capacity", "quota", "gang")
        ):
            at = record.retry_at
        if at is not None:
            self._order += 1
            heapq.heappush(self._timed, (at, self._order, record.id))

    def relevance(
        self,
        strict: bool,
        need_head: Callable[[], bool],
        blocked: Mapping[str, str] | None = None,
    ) -> Callable[..., bool]:
        """Which sources can matter to a cycle (see :meth:`order`): in strict mode every
        job (it may block its queue, or be told its queue is blocked) but those already
        told that the head now blocking their queue (``blocked``: queue -> head) does;
        otherwise jobs to try, and while no backfill head is chosen, parked jobs that
        would become it."""
        sched = self._sched
        epoch = sched.capacity_epoch
        version = sched.state.version

        def relevant(key: tuple[Hashable, ...]) -> bool:
            kind = key[0]
            if kind == TOLD:
                return blocked is None or blocked.get(str(key[1])) != key[2]
            if strict or key is _ACTIVE:
                return True
            if kind == ROOM:
                shape = key[1]
                assert isinstance(shape, ShapeState)
                return shape.open or need_head()
            if kind == EPOCH:
                return key[1] != epoch or (bool(key[2]) and need_head())
            if kind == TOPOLOGY:
                return key[1] != version
            return False

        return relevant

    # -- queries -------------------------------------------------------------------------

    def position(self, record: JobRecord) -> tuple[str, int] | None:
        """(leaf queue, 1 + pending jobs of that queue ahead of the job in queue order now),
        or None if the job does not wait. Counted from the lanes' sorted lists."""
        self.flush()
        entry = self._entries.get(record.id)
        if entry is None:
            return None
        framework = self._sched.framework
        now = self._sched.now
        queue = record.job.queue
        if self._laned is None:
            mine = framework.sort_key(record, now)
            ahead = sum(
                1
                for e in self._entries.values()
                if e.record.job.queue == queue
                and e.record.state is JobState.PENDING
                and e is not entry
                and framework.sort_key(e.record, now) < mine
            )
            return (queue, ahead + 1)
        lanes = [lane for lane in self._lanes_of_queue.get(queue, []) if not lane.running]
        ahead = count_ahead(lanes, lambda r: framework.sort_key(r, now), record)
        return (queue, ahead + 1)

    def next_refiling(self, after: float) -> float | None:
        """The earliest time after ``after`` at which time alone re-files a job (a backoff
        ends, a preemption retry is due). May name a job that no longer waits (its entry
        is dropped when it comes due): a wakeup then changes nothing."""
        timed = self._timed
        if not timed:
            return None
        top = timed[0][0]
        if top > after:
            return top
        # entries due by ``after`` are re-filed by the next cycle; look past them
        return min((at for at, _order, _job in timed if at > after), default=None)

    def next_backoff_end(self, after: float) -> float | None:
        """The earliest end of a backoff after ``after`` among waiting pending jobs."""
        self.flush()
        best: float | None = None
        for lane in self._lanes.values():
            source = lane.sources.get(_BACKOFF)
            if source is None:
                continue
            for entry in source.items:
                until = entry.record.backoff_until
                if until > after and (best is None or until < best):
                    best = until
        return best
