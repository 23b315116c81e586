"""The kube-scheduler extender webhook: device-aware filtering, fragmentation-aware scoring,
binding with device assignment, and a preemption check, for clusters that keep
kube-scheduler.

kube-scheduler POSTs JSON to ``<urlPrefix>/<verb>``. The types of
``k8s.io/kube-scheduler/extender/v1`` have no json tags, so the keys are the Go field
names, capitalized exactly (``Pod``, ``Nodes``, ``NodeNames``, ``FailedNodes``, ...), and
the models below use those names as they are. Pods and nodes inside are core/v1 JSON,
usually without ``kind``/``apiVersion``.

Where node state comes from:

- with a cache (a :class:`~hetsched.k8s.scheduler.PodScheduler` watching the API server
  under a scheduler name no pod uses): nodes and every bound pod's allocation, so device
  shares in use are known; this is what ``nodeCacheCapable: true`` needs;
- without one, only the ``Nodes`` of the request, taken as empty (no usage is known):
  enough for static checks (device classes, selectors, taints), for tests and dry runs.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from hetsched.cluster.state import AllocationError, ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.profile import ProfileSpec
from hetsched.framework.runtime import Framework
from hetsched.k8s.api import ApiError
from hetsched.k8s.names import ASSIGN_PHASE, ASSIGNED_DEVICES
from hetsched.k8s.scheduler import PodScheduler
from hetsched.k8s.translate import (
    TranslateError,
    assigned_devices,
    node_from_k8s,
    pod_job,
)
from hetsched.model.job import Job
from hetsched.scheduler.core import task_key

__all__ = [
    "MAX_PRIORITY",
    "ExtenderArgs",
    "ExtenderBindingArgs",
    "ExtenderPreemptionArgs",
    "create_app",
    "node_reasons",
]

log = logging.getLogger(__name__)

#: ``MaxExtenderPriority``: extender scores run 0..10
MAX_PRIORITY = 10

Obj = dict[str, Any]


class _Args(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ExtenderArgs(_Args):
    """Filter and prioritize request: ``Nodes`` when not cache-capable, else ``NodeNames``."""

    Pod: Obj
    Nodes: Obj | None = None
    NodeNames: list[str] | None = None


class ExtenderBindingArgs(_Args):
    PodName: str
    PodNamespace: str
    PodUID: str = ""
    Node: str


class _MetaPod(_Args):
    UID: str


class _MetaVictims(_Args):
    Pods: list[_MetaPod] = Field(default_factory=list)
    NumPDBViolations: int = 0


class _Victims(_Args):
    Pods: list[Obj] = Field(default_factory=list)
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(_Args):
    Pod: Obj
    NodeNameToVictims: dict[str, _Victims] | None = None
    NodeNameToMetaVictims: dict[str, _MetaVictims] | None = None


def node_reasons(framework: Framework, ctx: CycleContext, candidates: Any) -> dict[int, str]:
    """Per rejected row, why: the first filter (in profile order) that rejected it and its
    reason from that filter's diagnosis, as ``"<filter>: <reason>"``."""
    out: dict[int, str] = {}
    mask = candidates
    for plugin in framework.filters:
        passed = plugin.filter(ctx, mask)
        rejected = mask & ~passed
        if rejected.any():
            for reason, rows in plugin.diagnose(ctx, rejected):
                for row in np.flatnonzero(rows & rejected):
                    out.setdefault(int(row), f"{plugin.name}: {reason}")
            for row in np.flatnonzero(rejected):
                out.setdefault(int(row), f"{plugin.name}: rejected")
        mask = passed
    return out


class _Extender:
    """The decisions behind the routes; ``cache`` None means stateless (see module doc)."""

    def __init__(self, profile: ProfileSpec | None, cache: PodScheduler | None) -> None:
        self.profile = profile or ProfileSpec()
        self.cache = cache

    @contextlib.contextmanager
    def _state(self, nodes: Obj | None) -> Iterator[tuple[ClusterState, Framework]]:
        """The state to decide on, with a framework bound to it; nodes of the request
        that the cache does not know yet are added (to a fork, never to the cache)."""
        items = list((nodes or {}).get("items") or [])
        if self.cache is None:
            state = ClusterState([node_from_k8s(n) for n in items])
            yield state, Framework(self.profile)
            return
        with self.cache.lock:
            state = self.cache.core.state
            unknown = [n for n in items if n["metadata"]["name"] not in state.node_index]
            if unknown:
                state = state.fork()
                for node in unknown:
                    state.add_node(node_from_k8s(node))
            yield state, self.cache.core.framework

    @staticmethod
    def _job(pod: Obj) -> Job:
        return pod_job(pod)

    def filter(self, args: ExtenderArgs) -> Obj:
        cache_capable = args.NodeNames is not None
        names = (
            list(args.NodeNames or [])
            if cache_capable
            else [n["metadata"]["name"] for n in (args.Nodes or {}).get("items") or []]
        )
        try:
            job = self._job(args.Pod)
        except TranslateError as exc:
            return _filter_result(cache_capable, None, [], {}, {}, str(exc))
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        passed: list[str] = []
        with self._state(args.Nodes) as (state, framework):
            ctx = CycleContext(state, job, job.resources)
            rows = {n: state.node_index.get(n) for n in names}
            candidates = np.zeros(len(state), np.bool_)
            for row in rows.values():
                if row is not None:
                    candidates[row] = True
            candidates &= state.active
            feasible = framework.feasible(ctx, candidates.copy())
            reasons = node_reasons(framework, ctx, candidates & ~feasible)
            # would the node hold the pod if it were empty? if not, preemption cannot help
            empty = ClusterState(state.nodes[r] for r in sorted(reasons))
            empty_ctx = CycleContext(empty, job, job.resources)
            never = ~framework.feasible(empty_ctx)
            never_names = {empty.nodes[i].name for i in np.flatnonzero(never)}
            for name, row in rows.items():
                if row is None or not state.active[row]:
                    unresolvable[name] = "hetsched: node unknown to hetsched"
                elif feasible[row]:
                    passed.append(name)
                elif name in never_names:
                    unresolvable[name] = reasons[row]
                else:
                    failed[name] = reasons[row]
        items = None
        if not cache_capable:
            keep = set(passed)
            items = [
                n for n in (args.Nodes or {}).get("items") or [] if n["metadata"]["name"] in keep
            ]
        return _filter_result(cache_capable, items, passed, failed, unresolvable, "")

    def prioritize(self, args: ExtenderArgs) -> list[Obj]:
        names = (
            list(args.NodeNames or [])
            if args.NodeNames is not None
            else [n["metadata"]["name"] for n in (args.Nodes or {}).get("items") or []]
        )
        try:
            job = self._job(args.Pod)
        except TranslateError:
            return [{"Host": n, "Score": 0} for n in names]
        with self._state(args.Nodes) as (state, framework):
            ctx = CycleContext(state, job, job.resources)
            known = [n for n in names if n in state.node_index]
            candidates = np.zeros(len(state), np.bool_)
            for name in known:
                candidates[state.node_index[name]] = True
            feasible = framework.feasible(ctx, candidates & state.active)
            rows = np.flatnonzero(feasible)
            raw = framework.scores(ctx, rows) if rows.size else np.zeros(0)
        scores = dict.fromkeys(names, 0)
        if rows.size:
            low, high = float(raw.min()), float(raw.max())
            for row, value in zip(rows, raw, strict=True):
                scaled = (
                    MAX_PRIORITY
                    if high - low < 1e-9
                    else round(MAX_PRIORITY * (float(value) - low) / (high - low))
                )
                scores[state.nodes[int(row)].name] = int(scaled)
        return [{"Host": n, "Score": scores[n]} for n in names]

    def bind(self, args: ExtenderBindingArgs) -> Obj:
        cache = self.cache
        if cache is None:
            return {"Error": "hetsched extender: bind needs a connection to the API server"}
        key = f"{args.PodNamespace}/{args.PodName}"
        with cache.lock:
            pod = cache.pods.get(key)
            if pod is None:
                return {"Error": f"hetsched extender: pod {key} not seen yet"}
            try:
                job = self._job(pod)
            except TranslateError as exc:
                return {"Error": str(exc)}
            state = cache.core.state
            if args.Node not in state.node_index:
                return {"Error": f"hetsched extender: node {args.Node} unknown"}
            only = np.zeros(len(state), np.bool_)
            only[state.node_index[args.Node]] = True
            ctx = CycleContext(state, job, job.resources)
            placement = cache.core.framework.select(ctx, only & state.active)
        if placement is None:
            return {"Error": f"hetsched extender: pod {key} no longer fits on {args.Node}"}
        try:
            if placement.devices:
                annotations = {
                    ASSIGNED_DEVICES: assigned_devices(placement),
                    ASSIGN_PHASE: "allocating",
                }
                cache.api.patch_pod(
                    args.PodNamespace, args.PodName, {"metadata": {"annotations": annotations}}
                )
            if not cache.api.bind(args.PodNamespace, args.PodName, args.PodUID, args.Node):
                return {"Error": f"pod {key} is already bound (409)"}
        except ApiError as exc:
            return {"Error": f"binding {key} to {args.Node}: {exc}"}
        # assume the binding at once (the watch confirms it later), so that the next bind
        # never hands out the same device share
        bound = copy.deepcopy(pod)
        bound.setdefault("spec", {})["nodeName"] = args.Node
        if placement.devices:
            bound["metadata"].setdefault("annotations", {})[ASSIGNED_DEVICES] = assigned_devices(
                placement
            )
        with cache.lock:
            cache.pods[key] = bound
            cache.assume(bound)
        return {"Error": ""}

    def preempt(self, args: ExtenderPreemptionArgs) -> Obj:
        """Keep the nodes where evicting the proposed victims makes room for the pod's
        devices too; the victims are returned as given (in the Meta form)."""
        proposed: dict[str, list[str]] = {}
        if args.NodeNameToMetaVictims is not None:
            proposed = {n: [p.UID for p in v.Pods] for n, v in args.NodeNameToMetaVictims.items()}
        elif args.NodeNameToVictims is not None:
            proposed = {
                n: [str(p.get("metadata", {}).get("uid", "")) for p in v.Pods]
                for n, v in args.NodeNameToVictims.items()
            }
        try:
            job = self._job(args.Pod)
        except TranslateError:
            return {"NodeNameToMetaVictims": {}}
        keep: dict[str, Obj] = {}
        cache = self.cache
        for node, uids in proposed.items():
            victims = {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": 0}
            if cache is None:
                keep[node] = victims
                continue
            with cache.lock:
                state = cache.core.state
                if node not in state.node_index:
                    continue
                fork = state.fork()
                for key, obj in cache.pods.items():
                    if str(obj.get("metadata", {}).get("uid", "")) in uids and key in cache.owner:
                        job_id, task = cache.owner[key]
                        with contextlib.suppress(KeyError, AllocationError):
                            fork.release(task_key(job_id, task, cache._run.get(job_id, 1)))
                only = np.zeros(len(fork), np.bool_)
                only[fork.node_index[node]] = True
                ctx = CycleContext(fork, job, job.resources)
                if cache.core.framework.feasible(ctx, only & fork.active).any():
                    keep[node] = victims
        return {"NodeNameToMetaVictims": keep}


def _filter_result(
    cache_capable: bool,
    items: list[Obj] | None,
    passed: list[str],
    failed: dict[str, str],
    unresolvable: dict[str, str],
    error: str,
) -> Obj:
    """ExtenderFilterResult. A cache-capable extender must answer ``NodeNames`` and a
    non-cache-capable one ``Nodes``: answering neither means zero feasible nodes."""
    return {
        "Nodes": None if cache_capable else {"metadata": {}, "items": items or []},
        "NodeNames": passed if cache_capable else None,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": error,
    }


def create_app(profile: ProfileSpec | None = None, cache: PodScheduler | None = None) -> FastAPI:
    """The webhook app: POST /filter, /prioritize, /bind, /preempt; GET /healthz."""
    extender = _Extender(profile, cache)
    app = FastAPI(title="hetsched scheduler extender", docs_url=None, redoc_url=None)

    @app.get("/healthz")
    def healthz() -> Obj:
        return {"ok": True}

    @app.post("/filter")
    def filter_(args: ExtenderArgs) -> Obj:
        return extender.filter(args)

    @app.post("/prioritize")
    def prioritize(args: ExtenderArgs) -> list[Obj]:
        return extender.prioritize(args)

    @app.post("/bind")
    def bind(args: ExtenderBindingArgs) -> Obj:
        return extender.bind(args)

    @app.post("/preempt")
    def preempt(args: ExtenderPreemptionArgs) -> Obj:
        return extender.preempt(args)

    return app
