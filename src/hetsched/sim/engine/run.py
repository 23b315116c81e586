"""What a run of the event-driven mode takes and gives: its configuration, the cluster
changes injected into it, and its result (each job's outcome, the time series, the
totals)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hetsched.cluster.state import ClusterState
from hetsched.framework.profile import ProfileSpec
from hetsched.scheduler import DeviceHealthChanged, NodeAdded, NodeRemoved, Scheduler
from hetsched.sim.accounting import TimeSeries
from hetsched.sim.network import NetworkCost
from hetsched.sim.outcomes import JobOutcome

__all__ = ["ClusterChange", "CoreFactory", "EngineConfig", "Progress", "SimResult"]

#: builds the core: ``(state, profile, seed) -> Scheduler`` (a test or benchmark may wrap it)
CoreFactory = Callable[[ClusterState, ProfileSpec | None, int], Scheduler]

#: callback ``(finished jobs, total jobs, virtual time)`` for progress bars
Progress = Callable[[int, int, float], None]


@dataclass(frozen=True, slots=True)
class ClusterChange:
    """A cluster event injected at virtual time ``time`` (a failure, a repair, growth)."""

    time: float
    event: NodeAdded | NodeRemoved | DeviceHealthChanged


@dataclass(frozen=True, slots=True)
class EngineConfig:
    #: virtual seconds between ticks while jobs wait (aging, timeouts); 0 or None: no
    #: periodic ticks, only those the core asks for through ``next_wakeup()``
    tick_s: float | None = 60.0
    #: consecutive ticks that change nothing, with no other event left, before giving up
    idle_ticks: int = 60
    #: stop at this virtual time (None: when the workload has drained)
    until: float | None = None
    #: call the progress callback every this many steps
    progress_every: int = 2000
    #: let the core keep the records of ended jobs (its ``record``, ``why`` and history
    #: then answer for them after the run); off, it drops them, and a replay holds only
    #: the jobs in the system besides its own outcome columns
    keep_ended_jobs: bool = False
    #: the network's levels and the speed of a gang by the narrowest domain holding it
    #: (:mod:`hetsched.sim.network`); the core gets the levels too. None: no network cost
    network: NetworkCost | None = None


@dataclass(frozen=True, slots=True)
class SimResult:
    #: one outcome per job of the workload, in its order (columns: an OutcomeTable)
    jobs: Sequence[JobOutcome]
    series: TimeSeries
    #: per user: integral over time of the user's dominant share while it had jobs in the
    #: system, and the length of that time (see metrics.jain_index)
    user_share_integral: dict[str, float]
    user_active_s: dict[str, float]
    preemptions: int
    lost_work_s: float
    steps: int
    handle_calls: int
    end_time: float
    #: resource label -> capacity at the start (millicores or device milli-units)
    initial_capacity: dict[str, int]
    #: task-seconds spent writing checkpoints, and migrations (Migrate actions)
    checkpoint_s: float = 0.0
    migrations: int = 0
