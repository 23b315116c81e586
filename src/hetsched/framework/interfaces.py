"""One small Protocol per extension point.

A plugin implements only the points it needs; the runtime finds them with ``isinstance``.
Filter and Score work on all candidate nodes at once: arrays in, arrays out.

Order of an attempt: QueueSort (between attempts) -> PreFilter -> Filter -> Score ->
NormalizeScore -> device choice -> Reserve -> Permit -> Bind; PostFilter runs when Filter
leaves no node.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import QueuedJob
from hetsched.framework.status import Status

__all__ = [
    "BindPlugin",
    "BoolArray",
    "ChoosesDevices",
    "FilterPlugin",
    "FloatArray",
    "IntArray",
    "LanedQueueSort",
    "NormalizesScores",
    "PermitPlugin",
    "Plugin",
    "PostFilterPlugin",
    "PreFilterPlugin",
    "QueueSortPlugin",
    "Rejection",
    "ReservePlugin",
    "ScorePlugin",
]

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
#: a reason and the candidate rows it rejects
Rejection = tuple[str, BoolArray]


@runtime_checkable
class Plugin(Protocol):
    name: str


@runtime_checkable
class QueueSortPlugin(Plugin, Protocol):
    def sort_key(self, job: QueuedJob, now: float) -> tuple[Hashable, ...]:
        """Order of pending jobs: smaller keys are tried first. Must be a total order."""
        ...


@runtime_checkable
class LanedQueueSort(Protocol):
    """A queue sort whose order the core can keep incrementally (see
    ``hetsched.queueing.waiting``): waiting jobs fall into *lanes*, and within a lane they
    keep a static order, so a cycle merges lanes instead of sorting every job.

    Contract: ``lane(job)`` and ``rank(job)`` do not change while the job waits (the core
    files it again when it is requeued); within one lane, ``sort_key(job, now)`` never
    decreases along ``rank`` for any ``now`` and any usage; and a key read again during a
    cycle only grows (usage only grows within a cycle). Keys are unique (they end with the
    job's arrival sequence).
    """

    def lane(self, job: QueuedJob) -> Hashable:
        """The lane of a waiting job: jobs of one lane share the part of the key that
        depends on anything but the job (a user's share, a priority class)."""
        ...

    def rank(self, job: QueuedJob) -> tuple[Hashable, ...]:
        """The job's static order within its lane."""
        ...


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def prefilter(self, ctx: CycleContext) -> Status:
        """Called once per attempt before Filter. UNRESOLVABLE ends the attempt for good
        (for example a request no node of this cluster could ever hold)."""
        ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(self, ctx: CycleContext, candidates: BoolArray) -> BoolArray:
        """Return the subset of ``candidates`` (a mask over node rows) that can host the task.

        Must not modify ``candidates``. Called on the hot path: no Python loop over nodes.
        """
        ...

    def diagnose(self, ctx: CycleContext, candidates: BoolArray) -> list[Rejection]:
        """Why candidates are rejected: (reason, rejected mask) pairs, each mask a subset of
        ``candidates``. Called only to explain a failure, so it may be slower than filter."""
        ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        """Scores of the feasible ``rows``, higher is better, nominally 0..100."""
        ...


@runtime_checkable
class NormalizesScores(Protocol):
    def normalize(self, ctx: CycleContext, scores: FloatArray) -> FloatArray:
        """Map this plugin's raw scores to 0..100 before weights apply."""
        ...


@runtime_checkable
class ChoosesDevices(Protocol):
    def choose_devices(self, ctx: CycleContext, row: int) -> tuple[DeviceShare, ...] | None:
        """Which devices of node ``row`` the task takes; None to leave it to the default."""
        ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(self, ctx: CycleContext, placement: Placement) -> Status:
        """Called after a node is chosen and its capacity allocated. A failure undoes it."""
        ...

    def unreserve(self, ctx: CycleContext, placement: Placement) -> None:
        """Undo reserve. Must be idempotent: it may run for a reserve that failed."""
        ...


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    def permit(self, ctx: CycleContext, placements: Sequence[Placement]) -> Status:
        """Last word before binding all of a job's placements (gang checks, admission)."""
        ...


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    def post_filter(self, ctx: CycleContext, diagnosis: Sequence[Rejection]) -> Status:
        """Called when no node passed Filter: may make room (preemption) for a later attempt."""
        ...


@runtime_checkable
class BindPlugin(Plugin, Protocol):
    def bind(self, ctx: CycleContext, placements: Sequence[Placement]) -> Status:
        """Called with the final placements; drivers carry out the binding itself."""
        ...
