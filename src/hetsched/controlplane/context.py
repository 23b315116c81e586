"""The service's parts, as the HTTP routes, the submission path and the metrics see them.

The routes are shared by ``hetsched up`` and ``hetsched federation up``: each supplies a
:class:`Loop` (what owns its core: the service's reconcile loop, the federation's) and a
:class:`LogReader` (the service reads its tasks' files, the federation asks members).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from hetsched.agent.guard import Guard
from hetsched.agent.watcher import NodeWatcher
from hetsched.cluster.stranding import Typical
from hetsched.controlplane.api.auth import Authenticator, RateLimiter
from hetsched.controlplane.checkpointing import CheckpointProtocol
from hetsched.controlplane.faults import TurnFaults
from hetsched.controlplane.fencing import Fencing
from hetsched.controlplane.loopmetrics import LoopMetrics
from hetsched.controlplane.queues import QueuesSpec
from hetsched.controlplane.schemas import Feasibility, SubmitSpec
from hetsched.controlplane.speedlearn import SpeedLearner
from hetsched.controlplane.storage.store import Store
from hetsched.drivers.executor import ProcessExecutor
from hetsched.model.device import Device
from hetsched.model.job import Job
from hetsched.scheduler.view import SchedulerView

__all__ = ["LogReader", "Loop", "Service"]


class Loop(Protocol):
    """The thread that owns the core, as the routes and metrics see it: they hand it what
    the API committed and read the views it refreshes (the core only under ``lock``)."""

    lock: threading.Lock
    nodes_view: list[dict[str, Any]]
    quota_view: dict[str, dict[str, dict[str, float]]]
    metrics: LoopMetrics
    #: failed turns: alerts, jobs held back, the wedge (controlplane/faults.py)
    faults: TurnFaults

    @property
    def guard(self) -> Guard | None:
        """The overcommit guard of the machine's tasks, if one runs."""
        ...

    @property
    def watcher(self) -> NodeWatcher | None:
        """What watches the nodes' devices (this machine's, or a Ray cluster's), if one
        runs."""
        ...

    @property
    def checkpoints(self) -> CheckpointProtocol | None:
        """The checkpoint protocol of the tasks this loop runs (a report goes to the loop
        through it), if it runs tasks that use one."""
        ...

    @property
    def view(self) -> SchedulerView: ...

    @property
    def devices(self) -> Mapping[str, Device]: ...

    def submitted(
        self, row: dict[str, Any], spec: SubmitSpec | None = None, job: Job | None = None
    ) -> None: ...

    def cancelled(self, job_id: str, user: str) -> None: ...

    def stop(self) -> None: ...


class LogReader(Protocol):
    def read(
        self, job_id: str, task: int, stream: str, offset: int, limit: int
    ) -> tuple[bytes, int]:
        """Up to ``limit`` bytes of a task's ``stream`` from ``offset``, and the offset to
        follow from; raises HTTPException (404, 403) for a log it must not serve."""
        ...


@dataclass
class Service:
    """Everything the routes need, built by the server (or a test)."""

    store: Store
    loop: Loop
    #: the process executor (``hetsched up``: local or Ray; None for a federation)
    executor: ProcessExecutor | None
    queues: QueuesSpec
    feasibility: Feasibility
    auth: Authenticator
    limiter: RateLimiter
    auth_failures: RateLimiter
    #: hetsched users that have an OS account, when jobs run as mapped users
    mapped_users: frozenset[str] | None = None
    #: serve ``/metrics`` without a token (``--metrics-public``)
    metrics_public: bool = False
    #: serve ``/docs``, ``/redoc`` and ``/openapi.json`` without a token (``--public-docs``)
    docs_public: bool = False
    #: the leases of federations that send jobs here (controlplane/fencing.py)
    fencing: Fencing | None = None
    #: where task logs come from (default: the executor's files)
    logs: LogReader | None = None
    #: class or class/model -> what one accelerator's typical job needs beside it, for the
    #: stranded-accelerators gauge (the profile's ``stranding`` score args; {}: proportional)
    stranding: Mapping[str, Typical] = field(default_factory=dict)
    #: speeds learned from progress reports (``hetsched up``; None for a federation)
    speeds: SpeedLearner | None = None
