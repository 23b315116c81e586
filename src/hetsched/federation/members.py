"""Each member's state in the federation, and the core events its changes become.

A member is one node of the federation's core: its capacity is the sum of its nodes', its
devices are its nodes' devices (ids prefixed ``member~incarnation/``), its labels are the
member's labels plus ``hetsched.io/member`` and ``hetsched.io/member-state``.

```
joining --(lease live, nodes known)--> ready <--(renewed in time)--> unreachable
   ^                                     |                               |
   |                                     +--(the member reports a lapse)-+--> lapsed
   |                                                                             |
fenced <--(its jobs reported ended, or the lease's upper bound + fence_after passed)--+
   |         (and from unreachable once that bound passed)
   +--(the member's lease is live again) --> ready (a new incarnation)
```

- **ready**: the lease is surely live (its lower bound minus the margin is ahead): the
  member takes new jobs.
- **unreachable**: no renewal confirmed in time. The member keeps its jobs (they may run);
  it takes no new one (NodeChanged: the state label).
- **lapsed**: the member reported that the lease lapsed there: its jobs are being stopped.
- **fenced**: every task the member ran for us has surely stopped: NodeRemoved, so the core
  requeues its jobs (each by its ``on_device_failure``: from scratch, from its checkpoint,
  or failed) and none of its allocations is held any longer.

A member that comes back after it was fenced joins again as a new incarnation (new device
ids in the core); what it ran before is ended there and is not started again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from hetsched.federation.jobs import MEMBER_LABEL
from hetsched.federation.lease import LeaseBounds
from hetsched.federation.plugins import READY, STATE_LABEL
from hetsched.federation.worker import Worker
from hetsched.model.device import Device, Node

__all__ = [
    "FENCED",
    "JOINING",
    "LAPSED",
    "UNREACHABLE",
    "MemberState",
    "labels_of",
    "member_node",
    "member_view",
    "members_nodes",
]

JOINING = "joining"
UNREACHABLE = "unreachable"
LAPSED = "lapsed"
FENCED = "fenced"


@dataclass(slots=True)
class MemberState:
    """One member as the loop tracks it."""

    name: str
    worker: Worker
    labels: Mapping[str, str]
    #: the member's queue its jobs go into (hetsched members)
    queue: str
    status: str = JOINING
    #: why it is in that state (for the views and job histories)
    why: str = "not heard from yet"
    incarnation: int = 0
    #: its nodes as last reported
    inventory: tuple[Node, ...] | None = None
    #: its lapse count as last seen (None: not seen since the federation started)
    lapses: int | None = None
    bounds: LeaseBounds = field(default_factory=lambda: LeaseBounds(1.0, 0.0, math.inf))
    #: its node is in the core
    in_core: bool = False
    #: when it was last heard from (federation clock)
    heard: float | None = None
    #: the federation's jobs live there, as it last said (its queue and what runs)
    live_jobs: int = 0

    @property
    def node_name(self) -> str:
        return self.name


def member_node(state: MemberState) -> Node:
    """The core node of the member's current incarnation (its inventory must be known)."""
    assert state.inventory is not None
    prefix = f"{state.name}~{state.incarnation}/"
    devices = tuple(
        Device(prefix + d.id, d.device_class, d.vendor, d.model, d.attributes, d.health)
        for n in state.inventory
        for d in n.devices
    )
    return Node(
        state.name,
        sum(n.cpu_milli for n in state.inventory),
        sum(n.memory_mib for n in state.inventory),
        devices,
        labels_of(state),
    )


def member_view(state: MemberState, now: float) -> dict[str, Any]:
    """The member as the API shows it (``GET /v1/nodes``: each member node's ``member``)."""
    return {
        "name": state.name,
        "state": state.status,
        "why": state.why,
        "incarnation": state.incarnation,
        "labels": dict(state.labels),
        "heard_s_ago": None if state.heard is None else max(0.0, now - state.heard),
        "lapses": state.lapses,
        "live_jobs": state.live_jobs,
        "nodes": len(state.inventory or ()),
    }


def labels_of(state: MemberState) -> Mapping[str, str]:
    status = READY if state.status == READY else state.status
    return MappingProxyType({**state.labels, MEMBER_LABEL: state.name, STATE_LABEL: status})


def members_nodes(
    nodes: list[dict[str, Any]], states: Iterable[MemberState], now: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The API's node view of a federation, and its members' view: each member node in the
    core with its member's state; members out of the core (fenced, not joined yet) listed
    too, inactive, with the same labels as a member node in the core (its state among
    them)."""
    states = list(states)
    members = [member_view(s, now) for s in states]
    by_name = {m["name"]: m for m in members}
    for node in nodes:
        node["member"] = by_name.get(node["name"])
    listed = {n["name"] for n in nodes}
    nodes += [
        {
            "name": s.name,
            "active": False,
            "cpu_milli": 0,
            "cpu_free_milli": 0,
            "memory_mib": 0,
            "memory_free_mib": 0,
            "labels": dict(labels_of(s)),
            "devices": [],
            "member": by_name[s.name],
        }
        for s in states
        if s.name not in listed
    ]
    return nodes, members
