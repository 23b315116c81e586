"""What the API serves about the cluster, computed from the core's read view.

The reconcile loop refreshes these every half second, under its lock; the routes read the
last copy without touching the core.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hetsched.cluster.network import domains_of
from hetsched.cluster.state import ClusterState
from hetsched.scheduler.view import SchedulerView

__all__ = ["node_view", "quota_view"]


def node_view(state: ClusterState, reasons: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every node with its capacity, what is free, and its devices; ``reasons`` says why the
    watcher last saw a device change (``removed``, ``unhealthy: XID 79``). With network
    levels, ``domains``: its domain at each level, by level label."""
    out: list[dict[str, Any]] = []
    for row, node in enumerate(state.nodes):
        extra = {"domains": domains_of(state, node.name)} if state.levels else {}
        out.append(
            {
                **extra,
                "name": node.name,
                "active": bool(state.active[row]),
                "cpu_milli": int(state.cpu_cap[row]),
                "cpu_free_milli": int(state.cpu_free[row]),
                "memory_mib": int(state.mem_cap[row]),
                "memory_free_mib": int(state.mem_free[row]),
                "labels": dict(node.labels),
                "devices": [
                    {
                        "id": d.id,
                        "class": d.device_class,
                        "vendor": d.vendor,
                        "model": d.model,
                        "attributes": dict(d.attributes),
                        "free_share": int(state.dev_free[row, slot]),
                        "healthy": bool(state.dev_healthy[row, slot]),
                        "health_reason": reasons.get(d.id, ""),
                    }
                    for slot, d in enumerate(node.devices)
                ],
            }
        )
    return out


def quota_view(view: SchedulerView) -> dict[str, dict[str, dict[str, float]]]:
    """What the profile's queue tree says per queue and flavor: nominal quota, usage now,
    borrowed (above nominal) and free (below it); empty without a tree. Device flavors are
    in devices, cpu in millicores, memory in MiB."""
    return {
        queue: {
            flavor: {"quota": u.quota, "used": u.used, "borrowed": u.borrowed, "free": u.free}
            for flavor, u in flavors.items()
        }
        for queue, flavors in view.quotas().items()
    }
