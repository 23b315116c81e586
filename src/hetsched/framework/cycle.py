"""Per-attempt context shared by the plugins of one placement attempt."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hetsched.cluster.state import ClusterState
from hetsched.model.job import Job, TaskRequest

__all__ = ["CycleContext"]


@dataclass(slots=True)
class CycleContext:
    """What one placement attempt sees.

    ``state`` may be a fork (gang and preemption attempts work on forks). ``data`` holds
    per-attempt blobs that a plugin computes in one point and reads in a later one, under
    the plugin's own name.

    ``what_if`` marks a trial that commits to nothing (backfill, preemption, ``why``, the
    extender): a plugin that draws random numbers must not advance its stream for it, so
    whether a trial ran never changes a real decision.
    """

    state: ClusterState
    job: Job
    request: TaskRequest
    now: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)
    what_if: bool = False
