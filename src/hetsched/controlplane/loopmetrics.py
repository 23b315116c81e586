"""What the reconcile loop counts as it goes, and the dashboard's history.

The loop calls :meth:`LoopMetrics.observe_turn` after each turn that ran the core,
:meth:`LoopMetrics.turn_done` or :meth:`LoopMetrics.turn_failed` after every turn, and
:meth:`LoopMetrics.sample` now and then. The families are registered on the registry the
service's ``/metrics`` renders (controlplane/metrics.py adds the state computed at scrape time).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hetsched.cluster.state import ClusterState
from hetsched.controlplane.faults import TurnFaults
from hetsched.model.device import SHARE_UNITS
from hetsched.scheduler import Action, Bind, Change, JobTransition, Preempt, Reject
from hetsched.scheduler.view import SchedulerView

if TYPE_CHECKING:
    from hetsched.controlplane.planner import TurnPlan

__all__ = ["History", "LoopMetrics", "Sample", "allocation_by_class"]

log = logging.getLogger(__name__)


# -- history for the dashboard -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster at one moment: allocated and measured share per device class (0..1),
    jobs waiting per queue, jobs running."""

    time: float
    allocation: dict[str, float]
    utilization: dict[str, float]
    pending: dict[str, int]
    running: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "allocation": self.allocation,
            "utilization": self.utilization,
            "pending": self.pending,
            "running": self.running,
        }


class History:
    """A bounded ring of samples, one every ``interval_s`` at most (thread-safe)."""

    def __init__(self, interval_s: float = 2.0, size: int = 1800) -> None:
        self.interval_s = interval_s
        self._samples: deque[Sample] = deque(maxlen=size)
        self._guard = threading.Lock()

    def due(self, now: float) -> bool:
        with self._guard:
            return not self._samples or now - self._samples[-1].time >= self.interval_s

    def next_due(self) -> float | None:
        """When the next sample is due (None: at once, there is none yet)."""
        with self._guard:
            return self._samples[-1].time + self.interval_s if self._samples else None

    def add(self, sample: Sample) -> None:
        with self._guard:
            self._samples.append(sample)

    def since(self, after: float = 0.0) -> list[Sample]:
        with self._guard:
            return [s for s in self._samples if s.time > after]


def allocation_by_class(state: ClusterState) -> dict[str, float]:
    """Allocated share of capacity per device class, and of CPU (``cpu``)."""
    out: dict[str, float] = {}
    cpu_cap = int(state.cpu_cap[state.active].sum())
    if cpu_cap:
        out["cpu"] = 1 - int(state.cpu_free[state.active].sum()) / cpu_cap
    if not state.kinds:
        return out
    present = (state.dev_kind >= 0) & state.active[:, None]
    for cls in state.class_names():
        rows = [i for i, k in enumerate(state.kinds) if k.device_class == cls]
        mask = present & np.isin(state.dev_kind, rows)
        slots = int(mask.sum())
        if slots:
            used = slots * SHARE_UNITS - int(state.dev_free[mask].sum())
            out[cls] = used / (slots * SHARE_UNITS)
    return out


# -- what the loop counts ----------------------------------------------------------------


class LoopMetrics:
    """The counters and histograms the reconcile loop updates, and the dashboard's history.

    The loop calls :meth:`observe_turn` after each turn that ran the core, with the core
    still locked, :meth:`turn_done` or :meth:`turn_failed` after every turn, and
    :meth:`sample` now and then, with the core locked.
    """

    def __init__(self, history: History | None = None) -> None:
        self.registry = CollectorRegistry()
        self.history = history or History()
        r = self.registry
        self.attempts = Counter(
            "hetsched_scheduling_attempts",
            "Jobs tried by scheduling cycles, by result: scheduled (bound), unschedulable "
            "(still waiting after the cycle), rejected, error (the turn failed).",
            ["result"],
            registry=r,
        )
        self.cycle_seconds = Histogram(
            "hetsched_scheduling_cycle_duration_seconds",
            "Time the core took to handle one turn's events and run its scheduling cycle.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=r,
        )
        self.queue_wait = Histogram(
            "hetsched_queue_wait_seconds",
            "Time a job waited in its queue (since submission or requeue) until it was bound.",
            ["queue"],
            buckets=(0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600),
            registry=r,
        )
        self.preemptions = Counter(
            "hetsched_preemptions",
            "Jobs preempted, by the victim's queue and the kind (priority or reclaim).",
            ["queue", "kind"],
            registry=r,
        )
        self.migrations = Counter(
            "hetsched_migrations",
            "Running jobs moved to another placement (defragmentation, upgrade), by queue.",
            ["queue"],
            registry=r,
        )
        self.checkpoints = Counter(
            "hetsched_checkpoints",
            "Checkpoints reported by tasks and taken by the core, by the job's queue.",
            ["queue"],
            registry=r,
        )
        self.lost_work = Counter(
            "hetsched_lost_work_seconds",
            "Work lost by runs stopped to run again (preempted, moved, lost with a device or "
            "node, restarted): the time from their last checkpoint (or start) to the stop.",
            ["queue"],
            registry=r,
        )
        self._add_loop_health(r)
        #: mean measured utilization per device class; the app points it at the agent's parts
        self.measure: Callable[[], Mapping[str, float]] = dict
        # the families exist from the start, so rate() and alerts see zeros, not gaps
        for result in ("scheduled", "unschedulable", "rejected", "error"):
            self.attempts.labels(result)

    def _add_loop_health(self, r: CollectorRegistry) -> None:
        """The loop's own health: its turns, failed turns, last turn, held jobs, wedge."""
        self.turns = Counter("hetsched_loop_turns", "Reconcile loop turns.", registry=r)
        self.failures = Counter(
            "hetsched_loop_turn_failures",
            "Reconcile loop turns that raised (the core is then rebuilt from the store).",
            registry=r,
        )
        self.last_turn = Gauge(
            "hetsched_loop_last_turn_timestamp_seconds",
            "Unix time the reconcile loop last finished a turn; stalls show as its age.",
            registry=r,
        )
        self.held_jobs = Gauge(
            "hetsched_loop_held_jobs",
            "Jobs held back (pending, not scheduled) after scheduling turns failed on them.",
            registry=r,
        )
        self.wedged = Gauge(
            "hetsched_loop_wedged",
            "1 while the loop schedules nothing because the store and the core could not be "
            "made to agree on what is allocated; 0 otherwise.",
            registry=r,
        )

    def observe_turn(
        self,
        actions: Sequence[Action],
        seconds: float,
        queue_of: Callable[[str], str],
        pending: int,
    ) -> None:
        """Count one turn's decisions from its actions: ``queue_of`` names a job's queue,
        ``pending`` is how many jobs still wait after it."""
        self.cycle_seconds.observe(seconds)
        binds = 0
        for action in actions:
            if isinstance(action, Bind):
                binds += 1
            elif isinstance(action, JobTransition) and action.change is Change.STARTED:
                # a first bind of this run (not more tasks of a running elastic gang)
                wait = max(0.0, action.time - action.since)
                self.queue_wait.labels(queue_of(action.job_id)).observe(wait)
            elif isinstance(action, Preempt):
                self.preemptions.labels(queue_of(action.job_id), action.kind.value).inc()
            elif isinstance(action, Reject):
                self.attempts.labels("rejected").inc()
        if binds:
            self.attempts.labels("scheduled").inc(binds)
        if pending:
            self.attempts.labels("unschedulable").inc(pending)

    def observe_checkpoints(self, plan: TurnPlan, queue_of: Callable[[str], str]) -> None:
        """Count a turn's checkpoints, moves and lost work."""
        for report in plan.checkpoints:
            self.checkpoints.labels(queue_of(report.job_id)).inc()
        for job_id in plan.migrated:
            self.migrations.labels(queue_of(job_id)).inc()
        for job_id, _run, lost_s in plan.lost:
            self.lost_work.labels(queue_of(job_id)).inc(lost_s)

    def watch_faults(self, faults: TurnFaults) -> None:
        """Read the held jobs and the wedge from the loop's fault memory at each scrape."""
        self.held_jobs.set_function(lambda: len(faults.held()))
        self.wedged.set_function(lambda: 0.0 if faults.wedged is None else 1.0)

    def turn_done(self, now: float) -> None:
        self.turns.inc()
        self.last_turn.set(now)

    def turn_failed(self) -> None:
        self.failures.inc()
        self.attempts.labels("error").inc()

    def sample(self, view: SchedulerView, now: float) -> None:
        """Add a history sample if one is due. Called with the core locked."""
        if not self.history.due(now):
            return
        try:
            measured = dict(self.measure())
        except Exception:  # what the agent measures must never stop the loop
            log.exception("reading measured utilization failed")
            measured = {}
        pending, running = view.counts()
        allocation = allocation_by_class(view.cluster)
        self.history.add(Sample(now, allocation, measured, dict(pending), running))
