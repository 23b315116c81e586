"""A member cluster as the federation reaches it: the :class:`Member` protocol.

A member is anything that can run a job the federation sends and fence it: another
``hetsched up`` over its HTTP API (:mod:`hetsched.federation.hetsched_member`), a Kubernetes
cluster through its hetsched scheduler (:mod:`hetsched.federation.kube_member`), and later
kinds through the same few calls. Each call blocks and either answers, or raises
:class:`Unreachable` (nothing is known: the member may or may not have acted) or
:class:`Refused` (the member answered no, and will answer no again).

One member object is used by one thread at a time (the member's worker in the federation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from hetsched.model.device import Device, Health, Node

__all__ = [
    "TERMINAL",
    "Member",
    "MemberError",
    "MemberJob",
    "Refused",
    "Report",
    "Unreachable",
    "nodes_from_view",
    "nodes_to_view",
]

#: member job states that never change again
TERMINAL = frozenset({"succeeded", "failed", "cancelled", "rejected"})


class MemberError(Exception):
    """A call to a member that did not do what was asked."""


class Unreachable(MemberError):
    """No answer (or a transient one: try again later); the member may have acted."""


class Refused(MemberError):
    """The member answered, and will not do it (``status`` is its HTTP-like code)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class MemberJob:
    """A job the federation sent, as the member reports it."""

    id: str
    state: str
    reason: str = ""
    exit_code: int | None = None
    #: it lived across a lapse of the federation's lease there
    fenced: bool = False
    #: its tasks that may still run (starting, running or being stopped)
    active_tasks: int = 0

    @property
    def ended(self) -> bool:
        """It will not change again and nothing of it runs any more."""
        return self.state in TERMINAL and self.active_tasks == 0


@dataclass(frozen=True, slots=True)
class Report:
    """One renewal of the federation's lease at a member, and what came with it."""

    #: the nonce to name in the next renewal (None: the member issued none)
    nonce: str | None
    #: the nonce named was applied: the lease runs from that nonce's issue time
    renewed: bool
    #: the lease is live there now
    live: bool
    #: the lease lapsed there and jobs of it are still being stopped
    lapsed: bool
    #: how many times the lease has lapsed there, ever
    lapses: int
    #: the federation's jobs live there
    live_jobs: int
    #: the longest a task may outlive the lease's expiry there
    fence_after_s: float
    #: the states of the jobs asked about (those it knows)
    jobs: Mapping[str, MemberJob] = field(default_factory=lambda: MappingProxyType({}))
    #: the member's nodes with their total capacity (None: not reported this time)
    nodes: tuple[Node, ...] | None = None
    #: how old the nonce may have been when it was read (0: issued for this request)
    nonce_age_s: float = 0.0


class Member(Protocol):
    """What the federation asks of a member cluster (see the module docstring)."""

    @property
    def name(self) -> str: ...

    def renew(
        self, federation: str, lease_s: float, nonce: str | None, jobs: Sequence[str]
    ) -> Report:
        """Renew the lease by ``nonce`` (None the first time) and report the states of
        ``jobs`` (member job ids) and the member's nodes."""
        ...

    def submit(self, key: str, job: Mapping[str, Any]) -> str:
        """Start ``job`` (a submission body with ``federation`` set); returns the member's
        job id. The same ``key`` never starts a second job (a retry returns the first)."""
        ...

    def cancel(self, job_id: str) -> None:
        """Ask the member to stop a job it runs (done when it reports the job ended)."""
        ...

    def what_if(self, jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
        """For each submission body: would it fit now, in how many seconds, or never
        (``fits_now``, ``fits_ever``, ``start_in_s``, ``reason``); None when the member
        cannot say."""
        ...

    def logs(
        self, job_id: str, task: int, stream: str, offset: int, limit: int
    ) -> dict[str, Any] | None:
        """A chunk of a task's output (``data``, ``offset``), or None when the member keeps
        none it can serve."""
        ...

    def close(self) -> None: ...


def nodes_from_view(view: Sequence[Mapping[str, Any]]) -> tuple[Node, ...]:
    """Nodes from a member's node view (``GET /v1/nodes``, or a lease answer's ``nodes``):
    active nodes with their total capacity, devices (health included) and labels."""
    out: list[Node] = []
    for item in view:
        if not item.get("active", True):
            continue
        devices = tuple(
            Device(
                str(d["id"]),
                str(d["class"]),
                str(d.get("vendor", "")),
                str(d.get("model", "")),
                dict(d.get("attributes") or {}),
                Health.HEALTHY if d.get("healthy", True) else Health.UNHEALTHY,
            )
            for d in item.get("devices", [])
        )
        labels = {str(k): str(v) for k, v in (item.get("labels") or {}).items()}
        node = Node(
            str(item["name"]), int(item["cpu_milli"]), int(item["memory_mib"]), devices, labels
        )
        out.append(node)
    return tuple(out)


def nodes_to_view(nodes: Sequence[Node]) -> list[dict[str, Any]]:
    """The node view :func:`nodes_from_view` reads (what the federation keeps on disk)."""
    return [
        {
            "name": n.name,
            "active": True,
            "cpu_milli": n.cpu_milli,
            "memory_mib": n.memory_mib,
            "labels": dict(n.labels),
            "devices": [
                {
                    "id": d.id,
                    "class": d.device_class,
                    "vendor": d.vendor,
                    "model": d.model,
                    "attributes": dict(d.attributes),
                    "healthy": d.health is Health.HEALTHY,
                }
                for d in n.devices
            ],
        }
        for n in nodes
    ]
