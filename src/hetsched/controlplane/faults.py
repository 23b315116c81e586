"""What the reconcile loop does about a turn that fails: no blind retry.

A turn fails when the core raises, when the store refuses its record (a constraint the
core's books should have kept), or when launching raises. The loop then

1. raises an alert (:class:`LoopAlert`: the ``hetsched_loop_turn_failures_total`` metric,
   one log line, and the dashboard's banner through ``GET /v1/alerts``);
2. holds back the jobs the failed turn concerned (the jobs it was starting, else the jobs
   its events named): they stay pending in the store but are not given to the rebuilt
   core, so every other job keeps being scheduled;
3. rebuilds the core from the store, as a restart would, and checks that the two agree.

A held job goes back to the core alone, one per successful turn. A job that a turn fails
on :attr:`TurnFaults.limit` times is given up: it fails with the error as its reason, so
every job ends. A failure that concerns no job (a turn of ticks) holds nothing; the loop
waits longer after each consecutive failure (:meth:`TurnFaults.delay`), so a persistent
fault costs a log line every few seconds, not hundreds. While the store and the core
cannot be made to agree, the loop is *wedged*: it schedules nothing and retries the
rebuild with the same backoff, and the banner says why.

Thread-safe for readers (the routes read :meth:`alerts` and :meth:`held`); the loop's one
thread writes.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

__all__ = ["LoopAlert", "TurnFaults"]


@dataclass(frozen=True, slots=True)
class LoopAlert:
    """``kind``: ``turn_failed`` (a turn raised; the core was rebuilt), ``wedged`` (the core
    could not be rebuilt to agree with the store: nothing is scheduled), ``gave_up`` (a
    job that kept failing turns was failed), ``recovered`` (scheduling resumed after a
    wedge), ``store_unavailable`` (the store cannot be written: scheduling pauses, no job
    is held), ``store_recovered`` (it takes writes again), ``store_damaged`` (SQLite found a
    damaged page: what touches it answers 503; restore a backup)."""

    time: float
    kind: str
    message: str
    jobs: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"time": self.time, "kind": self.kind, "message": self.message, "jobs": self.jobs}


class TurnFaults:
    """The loop's memory of failed turns (see the module docstring)."""

    def __init__(self, limit: int = 3, base_delay_s: float = 0.1, max_delay_s: float = 30.0):
        #: failed turns a job may concern before it is given up
        self.limit = limit
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self._alerts: deque[LoopAlert] = deque(maxlen=200)
        #: job id -> the error of the turn that held it
        self._held: dict[str, str] = {}
        self._strikes: Counter[str] = Counter()
        #: turns failed in a row
        self.consecutive = 0
        #: why scheduling is stopped, while it is
        self.wedged: str | None = None
        self._lock = threading.Lock()

    # -- what the loop reports -----------------------------------------------------------

    def failed(self, error: str, jobs: set[str], now: float) -> tuple[LoopAlert, list[str]]:
        """A turn failed with ``error``, concerning ``jobs``: hold them. Returns the alert
        and the jobs to give up (they reached the limit)."""
        self.consecutive += 1
        give_up = []
        with self._lock:
            for job_id in sorted(jobs):
                self._strikes[job_id] += 1
                if self._strikes[job_id] >= self.limit:
                    give_up.append(job_id)
                    self._held.pop(job_id, None)
                else:
                    self._held[job_id] = error
            held = tuple(sorted(jobs))
            what = f"held back: {', '.join(held)}" if held else "no job named by the turn"
            message = f"a scheduling turn failed ({error}); {what}"
            alert = LoopAlert(now, "turn_failed", message, held)
            self._alerts.append(alert)
        return alert, give_up

    def gave_up(self, job_id: str, now: float) -> LoopAlert:
        with self._lock:
            self._strikes.pop(job_id, None)
            alert = LoopAlert(
                now,
                "gave_up",
                f"job {job_id} failed: {self.limit} scheduling turns failed on it",
                (job_id,),
            )
            self._alerts.append(alert)
        return alert

    def wedge(self, error: str, now: float) -> LoopAlert:
        with self._lock:
            self.wedged = error
            alert = LoopAlert(now, "wedged", f"scheduling stopped: {error}")
            self._alerts.append(alert)
        return alert

    def rebuilt(self, now: float) -> LoopAlert | None:
        """The core was rebuilt and agrees with the store; an alert if it was wedged."""
        with self._lock:
            if self.wedged is None:
                return None
            self.wedged = None
            alert = LoopAlert(now, "recovered", "scheduling resumed: the store and core agree")
            self._alerts.append(alert)
        return alert

    def store_down(self, reason: str, now: float) -> LoopAlert:
        """The store cannot be written (``reason``): scheduling pauses, no job is held."""
        with self._lock:
            message = f"{reason}: scheduling paused; nothing is lost, it resumes by itself"
            alert = LoopAlert(now, "store_unavailable", message)
            self._alerts.append(alert)
        return alert

    def store_damaged(self, reason: str, now: float) -> LoopAlert:
        """A read or write found the store damaged (``reason``)."""
        with self._lock:
            alert = LoopAlert(now, "store_damaged", reason)
            self._alerts.append(alert)
        return alert

    def store_back(self, reason: str, since: float, now: float) -> LoopAlert:
        """The store that was down since ``since`` (for ``reason``) takes writes again."""
        with self._lock:
            message = f"store back after {now - since:.1f}s ({reason}); scheduling resumed"
            alert = LoopAlert(now, "store_recovered", message)
            self._alerts.append(alert)
        return alert

    def succeeded(self) -> None:
        self.consecutive = 0

    def delay(self) -> float:
        """How long to wait before the next turn after ``consecutive`` failures."""
        if self.consecutive == 0:
            return 0.0
        return float(min(self.max_delay_s, self.base_delay_s * 2 ** (self.consecutive - 1)))

    # -- held jobs ------------------------------------------------------------------------

    def is_held(self, job_id: str) -> bool:
        with self._lock:
            return job_id in self._held

    def keep_only(self, job_ids: set[str]) -> None:
        """Forget holds of jobs that are not waiting to be resubmitted (a rebuild restored
        them as running, or they ended)."""
        with self._lock:
            for job_id in [j for j in self._held if j not in job_ids]:
                del self._held[job_id]

    def release(self, job_id: str | None = None) -> str | None:
        """Take ``job_id`` (or the longest-held job) off hold; None if none is held."""
        with self._lock:
            if job_id is None:
                job_id = next(iter(self._held), None)
            if job_id is None or self._held.pop(job_id, None) is None:
                return None
        return job_id

    def held(self) -> dict[str, str]:
        with self._lock:
            return dict(self._held)

    def alerts(self, since: float = 0.0) -> list[LoopAlert]:
        with self._lock:
            return [a for a in self._alerts if a.time > since]
