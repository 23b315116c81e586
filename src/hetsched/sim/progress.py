"""Work in the simulator: how far a run gets, what it saves, and what a stop throws away.

A run starts from the work its checkpoint saved (``done``; 0 from scratch) and computes at
``rate`` work per second (the job's speed on the device model it landed on, from
:mod:`hetsched.model.speed`; 1 without speed information, when work is the duration). With
a checkpoint interval ``I > 0`` and a cost ``C``, it computes for ``I`` seconds, then
spends ``C`` seconds writing a checkpoint (no progress), and so on; a checkpoint counts once
written. Interval 0 keeps all progress at no cost (the round-based model); no interval
keeps nothing but what a notice lets it save.

On a stop at time ``t`` with a notice of ``N`` seconds, a checkpointable run saves all it
computed when it can write a checkpoint within the notice (``C <= N``; the write of a
periodic checkpoint in progress at ``t`` is finished instead), and stops once it is written.
Otherwise it keeps its last periodic checkpoint. *Lost work* is the computing time since
the last save (or the run's start): at most the interval for a job that checkpoints
periodically. *Checkpointing time* is the time spent writing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RunProgress", "Saving"]


@dataclass(frozen=True, slots=True)
class Saving:
    """What a stop at some time keeps: ``work`` saved, ``time`` the save completes (the
    task stops then, or at the notice's end when it cannot save), whether the save was
    made on the notice, the seconds of computing lost and the seconds spent writing."""

    work: float
    time: float
    on_notice: bool
    lost_s: float
    writing_s: float


@dataclass(slots=True)
class RunProgress:
    """One run of one job (see the module docstring). Times on the virtual clock."""

    start: float
    done: float
    total: float
    rate: float
    interval: float | None = None
    cost: float = 0.0

    @property
    def periodic(self) -> bool:
        return self.interval is not None and self.interval > 0

    @property
    def cycle(self) -> float:
        assert self.interval is not None
        return self.interval + self.cost

    def end(self) -> float:
        """When the run finishes its work (inf when it makes no progress)."""
        left = max(0.0, self.total - self.done)
        if left <= 0:
            return self.start
        if self.rate <= 0:
            return math.inf
        compute = left / self.rate
        if not self.periodic:
            return self.start + compute
        assert self.interval is not None
        writes = max(0, math.ceil(compute / self.interval) - 1)
        return self.start + compute + writes * self.cost

    def _split(self, now: float) -> tuple[int, float]:
        """(periodic checkpoints written by ``now``, seconds into the current cycle)."""
        elapsed = max(0.0, now - self.start)
        if not self.periodic:
            return 0, elapsed
        done = math.floor(elapsed / self.cycle)
        return done, elapsed - done * self.cycle

    def work_at(self, now: float) -> float:
        """Work done by ``now`` (saved or not)."""
        written, into = self._split(now)
        compute = into
        if self.periodic:
            assert self.interval is not None
            compute = written * self.interval + min(into, self.interval)
        return min(self.total, self.done + self.rate * compute)

    def saved_at(self, now: float) -> tuple[float, float]:
        """(work saved by ``now`` by periodic checkpoints, when the last was written); the
        run's start and its starting work without one. Interval 0 saves everything."""
        if self.interval == 0:
            return self.work_at(now), now
        written, _ = self._split(now)
        if not written:
            return self.done, self.start
        assert self.interval is not None
        work = min(self.total, self.done + self.rate * written * self.interval)
        return work, self.start + written * self.cycle

    def next_save(self, after: float) -> float | None:
        """When the next periodic checkpoint after ``after`` is written (None: none before
        the run ends)."""
        if not self.periodic:
            return None
        written, _ = self._split(after)
        at = self.start + (written + 1) * self.cycle
        if at - after <= self.cycle * 1e-9:
            # ``after`` is itself a save time whose elapsed / cycle rounded down below its
            # count (38 + 60.1 = 98.1, but (98.1 - 38) / 60.1 is 0.999...): the next one
            at += self.cycle
        return at if at < self.end() else None

    def writing_s(self, until: float) -> float:
        """Seconds spent writing periodic checkpoints by ``until``."""
        if not self.periodic:
            return 0.0
        assert self.interval is not None
        written, into = self._split(until)
        return written * self.cost + max(0.0, into - self.interval)

    def stop(self, now: float, notice_s: float, checkpointable: bool) -> Saving:
        """What a stop at ``now`` with ``notice_s`` of notice keeps (see the module doc)."""
        if self.interval == 0:
            return Saving(self.work_at(now), now, True, 0.0, 0.0)
        if checkpointable and notice_s > 0:
            _, into = self._split(now)
            writing = self.writing_s(now)
            if self.periodic and self.interval is not None and into > self.interval:
                left = self.cycle - into  # a periodic write in progress: finish it
                if left <= notice_s:
                    work, _ = self.saved_at(now + left)
                    return Saving(work, now + left, True, 0.0, writing + left)
            elif self.cost <= notice_s:
                return Saving(self.work_at(now), now + self.cost, True, 0.0, writing + self.cost)
        # no save on the notice: it runs to the notice's end and keeps its last checkpoint
        end = now + (notice_s if checkpointable else 0.0)
        saved, _ = self.saved_at(end)
        lost = (self.work_at(end) - saved) / self.rate if self.rate > 0 else 0.0
        return Saving(saved, end, False, max(0.0, lost), self.writing_s(end))
