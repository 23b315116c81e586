"""The cluster routes: nodes, queues, and the dashboard's history and alerts, for any
valid token.

No postponed annotations in this module: FastAPI reads the routes' annotations.
"""

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from sqlalchemy.exc import SQLAlchemyError

from hetsched.cluster.stranding import stranded_accelerators
from hetsched.controlplane.context import Service
from hetsched.controlplane.storage.health import damaged, unavailable
from hetsched.controlplane.storage.store import Principal
from hetsched.model.device import Health

__all__ = ["add_cluster_routes"]


def add_cluster_routes(
    app: FastAPI, service: Service, caller: Callable[[Request], Awaitable[Principal]]
) -> None:
    """Nodes, queues and the dashboard's history, for any valid token."""
    Caller = Annotated[Principal, Depends(caller)]

    @app.get("/v1/nodes", tags=["cluster"])
    def nodes(who: Caller) -> list[dict[str, Any]]:
        """Every node, its capacity, what is free, its devices, and ``stranded``: how many
        of its free accelerators lack the CPU or memory their typical job needs."""
        loop = service.loop
        with loop.lock:
            report = stranded_accelerators(loop.view.cluster, service.stranding)
        return [{**n, "stranded": report.by_node.get(n["name"], 0)} for n in loop.nodes_view]

    @app.get("/v1/queues", tags=["cluster"])
    def queues(who: Caller) -> list[dict[str, Any]]:
        """Each queue: who may submit, jobs by state, and quota used, borrowed and free."""
        return _queues_view(service)

    @app.get("/v1/history", tags=["cluster"])
    def history(who: Caller, since: float = 0.0) -> dict[str, Any]:
        """Samples taken every few seconds for the dashboard's charts, newest last: allocated
        and measured share per device class, jobs pending per queue, jobs running."""
        ring = service.loop.metrics.history
        return {"interval_s": ring.interval_s, "samples": [s.to_dict() for s in ring.since(since)]}

    @app.get("/v1/alerts", tags=["cluster"])
    def alerts(who: Caller, since: float = 0.0) -> dict[str, Any]:
        """What the dashboard's banners show: the reconcile loop's alerts (failed turns,
        jobs held back or given up, a wedge), the overcommit guard's alerts (a user sees
        those of their own jobs and the node-wide ones), and every device that is not
        present and healthy, with the watcher's reason."""
        return _alerts_view(service, who, since)


def _alerts_view(service: Service, who: Principal, since: float) -> dict[str, Any]:
    loop = service.loop
    guard = loop.guard.recent(200) if loop.guard is not None else []
    guard = [a for a in guard if a.time > since]
    if not who.admin:
        mine = {
            row["id"]
            for row in service.store.jobs_by_ids(sorted({a.job_id for a in guard if a.job_id}))
            if row["owner"] == who.user
        }
        guard = [a for a in guard if not a.job_id or a.job_id in mine]
    devices = loop.watcher.view() if loop.watcher is not None else []
    held = loop.faults.held()
    alerts = [a.to_dict() for a in loop.faults.alerts(since)]
    # every job a banner mentions, by name and user: the held ones, the loop's alerts' (a
    # job given up is no longer held) and the guard's
    mentioned = [*held, *(j for a in alerts for j in a.get("jobs") or ())]
    mentioned += [a.job_id for a in guard if a.job_id]
    return {
        "wedged": loop.faults.wedged,
        "store": service.store.health.to_dict(),
        "held": held,
        "jobs": _named_jobs(service, who, mentioned),
        "loop": alerts,
        "guard": [a.to_dict() for a in guard],
        "devices": [
            d.to_dict() for d in devices if not d.present or d.health is not Health.HEALTHY
        ],
    }


def _queues_view(service: Service) -> list[dict[str, Any]]:
    counts: dict[str, dict[str, int]] = {}
    for item in service.store.queue_usage():
        counts.setdefault(item["queue"], {})[item["state"]] = item["count"]
    used: dict[str, dict[str, float]] = {}
    for item in service.store.running_specs():
        p = item["placement"]
        u = used.setdefault(item["queue"], {})
        u["cpu"] = u.get("cpu", 0.0) + p["cpu_milli"]
        u["memory"] = u.get("memory", 0.0) + p["memory_mib"]
        for d in p.get("devices", []):
            cls = (
                service.loop.devices[d["id"]].device_class
                if d["id"] in service.loop.devices
                else "device"
            )
            u[cls] = u.get(cls, 0.0) + d["share"] / 1000
    out: list[dict[str, Any]] = []
    core_quotas = service.loop.quota_view
    names = [q.name for q in service.queues.queues]
    names += [n for n in core_quotas if n not in names]
    names += sorted(set(counts) - set(names))
    by_name = service.queues.by_name()
    for name in names:
        spec = by_name.get(name)
        limits = spec.limits() if spec is not None else {}
        usage = used.get(name, {})
        keys = sorted(set(limits) | set(usage))
        if name in core_quotas:
            # the scheduling profile's queue tree: guarantees, borrowing, what the core holds
            out.append(
                {
                    "name": name,
                    "users": spec.users if spec is not None else None,
                    "jobs": counts.get(name, {}),
                    "quota_source": "profile",
                    "resources": core_quotas[name],
                }
            )
            continue
        out.append(
            {
                "name": name,
                "users": spec.users if spec is not None else None,
                "jobs": counts.get(name, {}),
                "quota_source": "queues file" if limits else "none",
                "resources": {
                    k: {
                        "quota": limits.get(k),
                        "used": usage.get(k, 0.0),
                        "borrowed": max(0.0, usage.get(k, 0.0) - limits[k]) if k in limits else 0.0,
                        "free": max(0.0, limits[k] - usage.get(k, 0.0)) if k in limits else None,
                    }
                    for k in keys
                },
            }
        )
    return out


def _named_jobs(service: Service, who: Principal, job_ids: list[str]) -> dict[str, Any]:
    """Name and user of the jobs the banners mention that the caller may see (a banner
    names a job, not only its id). Without them while the store fails: the alerts must
    still say that it fails."""
    try:
        rows = service.store.jobs_by_ids(sorted(set(job_ids))) if job_ids else []
    except (SQLAlchemyError, sqlite3.Error, OSError) as exc:
        if unavailable(exc) is None and damaged(exc) is None:
            raise
        return {}
    return {
        r["id"]: {"name": r["name"], "user": r["owner"]}
        for r in rows
        if who.admin or r["owner"] == who.user
    }
