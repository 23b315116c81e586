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

Malformed requests never fail with a 5xx: a pod hetsched cannot read is the filter's
``Error`` (and a 400 for prioritize and preempt, whose answers have no error field); a node
it cannot read (a bad quantity, a devices annotation that is not JSON) is that node in
``FailedNodes`` with the reason, and the others are judged as usual; a ``Nodes`` item
without ``metadata.name`` is the filter's ``Error`` (a 400 for prioritize).

``/bind`` is idempotent: a pod already bound to the node asked for is a success that changes
nothing (kube-scheduler retries a bind whose answer it did not get), one bound elsewhere
an error. The device assignment is written in the Binding itself, so a binding that fails
(409 or any error) leaves no annotation on the pod; the devices are assumed in the cache
under the same lock that chose them (a concurrent bind never gets them too) and released
again when the binding fails.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from hetsched.cluster.state import AllocationError, ClusterState
from hetsched.framework.cycle import CycleContext
from hetsched.framework.profile import ProfileSpec
from hetsched.framework.runtime import Framework
from hetsched.k8s.api import ApiError
from hetsched.k8s.scheduler import PodScheduler
from hetsched.k8s.translate import (
    TranslateError,
    assignment_annotations,
    node_from_k8s,
    pod_info,
    pod_job,
)
from hetsched.keys import TaskKey
from hetsched.model.device import Node
from hetsched.model.job import Job

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


class _BadRequest(Exception):
    """A request hetsched cannot read; the message says which field and why."""


def _node_items(nodes: Obj | None) -> list[tuple[str, Obj]]:
    """The ``Nodes`` of a request by name; _BadRequest for an item without a name."""
    if nodes is None:
        return []
    items = nodes.get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise _BadRequest("Nodes.items must be a list")
    out: list[tuple[str, Obj]] = []
    for i, item in enumerate(items):
        meta = item.get("metadata") if isinstance(item, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            raise _BadRequest(f"Nodes.items[{i}]: metadata.name is required")
        out.append((name, item))
    return out


def _candidate_names(args: ExtenderArgs) -> list[str]:
    if args.NodeNames is not None:
        return list(args.NodeNames)
    return [name for name, _ in _node_items(args.Nodes)]


class _Extender:
    """The decisions behind the routes; ``cache`` None means stateless (see module doc)."""

    def __init__(self, profile: ProfileSpec | None, cache: PodScheduler | None) -> None:
        self.profile = profile or ProfileSpec()
        self.cache = cache

    @contextlib.contextmanager
    def _state(
        self, items: list[tuple[str, Obj]]
    ) -> Iterator[tuple[ClusterState, Framework, dict[str, str]]]:
        """The state to decide on, with a framework bound to it, and why each node that
        could not be read was left out; nodes of the request that the cache does not know
        yet are added (to a fork, never to the cache)."""
        bad: dict[str, str] = {}

        def read(obj: Obj) -> Node | None:
            try:
                return node_from_k8s(obj)
            except TranslateError as exc:
                bad[str(obj["metadata"]["name"])] = f"hetsched: {exc}"
                return None

        if self.cache is None:
            nodes = [n for n in (read(obj) for _, obj in items) if n is not None]
            yield ClusterState(nodes), Framework(self.profile), bad
            return
        with self.cache.lock:
            state = self.cache.core.view.cluster
            unknown = [obj for name, obj in items if name not in state.node_index]
            # a node the cache holds but could not read: say why, not just "unknown"
            for name, obj in self.cache.nodes.items():
                if name not in state.node_index:
                    read(obj)
            fresh = [n for n in (read(obj) for obj in unknown) if n is not None]
            if fresh:
                state = state.fork()
                for node in fresh:
                    state.add_node(node)
            yield state, self.cache.core.framework, bad

    @staticmethod
    def _job(pod: Obj) -> Job:
        return pod_job(pod)

    def filter(self, args: ExtenderArgs) -> Obj:
        cache_capable = args.NodeNames is not None
        try:
            items = [] if cache_capable else _node_items(args.Nodes)
            job = self._job(args.Pod)
        except (_BadRequest, TranslateError) as exc:
            return _filter_result(cache_capable, None, [], {}, {}, str(exc))
        names = list(args.NodeNames or []) if cache_capable else [n for n, _ in items]
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        passed: list[str] = []
        with self._state(items) as (state, framework, bad):
            ctx = CycleContext(state, job, job.resources, what_if=True)
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
            empty_ctx = CycleContext(empty, job, job.resources, what_if=True)
            never = ~framework.feasible(empty_ctx)
            never_names = {empty.nodes[i].name for i in np.flatnonzero(never)}
            for name, row in rows.items():
                if name in bad:
                    failed[name] = bad[name]
                elif row is None or not state.active[row]:
                    unresolvable[name] = "hetsched: node unknown to hetsched"
                elif feasible[row]:
                    passed.append(name)
                elif name in never_names:
                    unresolvable[name] = reasons[row]
                else:
                    failed[name] = reasons[row]
        kept = None
        if not cache_capable:
            keep = set(passed)
            kept = [obj for name, obj in items if name in keep]
        return _filter_result(cache_capable, kept, passed, failed, unresolvable, "")

    def prioritize(self, args: ExtenderArgs) -> list[Obj]:
        try:
            items = [] if args.NodeNames is not None else _node_items(args.Nodes)
            job = self._job(args.Pod)
        except (_BadRequest, TranslateError) as exc:
            # a HostPriorityList has no error field: kube-scheduler logs a non-200 answer
            # and takes no scores from this extender
            raise HTTPException(400, str(exc)) from None
        names = _candidate_names(args)
        with self._state(items) as (state, framework, _):
            ctx = CycleContext(state, job, job.resources, what_if=True)
            known = [n for n in names if n in state.node_index]
            candidates = np.zeros(len(state), np.bool_)
            for name in known:
                candidates[state.node_index[name]] = True
            feasible = framework.feasible(ctx, candidates & state.active)
            rows = np.flatnonzero(feasible)
            raw = framework.scores(ctx, rows) if rows.size else np.zeros(0)
            row_names = [state.nodes[int(row)].name for row in rows]
        scores = dict.fromkeys(names, 0)
        if rows.size:
            low, high = float(raw.min()), float(raw.max())
            for name, value in zip(row_names, raw, strict=True):
                scaled = (
                    MAX_PRIORITY
                    if high - low < 1e-9
                    else round(MAX_PRIORITY * (float(value) - low) / (high - low))
                )
                scores[name] = int(scaled)
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
                info = pod_info(pod)
                job = self._job(pod)
            except TranslateError as exc:
                return {"Error": str(exc)}
            if args.PodUID and info.uid and args.PodUID != info.uid:
                return {"Error": f"pod {key} is uid {info.uid}, not {args.PodUID}: recreated"}
            held = _held_node(cache, key)
            if info.node_name or held:
                # a retry of a bind that went through (or a pod bound meanwhile): never
                # choose devices again for a bound pod
                return _bound_answer(key, info.node_name or held, args.Node)
            state = cache.core.view.cluster
            if args.Node not in state.node_index:
                return {"Error": f"hetsched extender: node {args.Node} unknown"}
            only = np.zeros(len(state), np.bool_)
            only[state.node_index[args.Node]] = True
            ctx = CycleContext(state, job, job.resources)
            placement = cache.core.framework.select(ctx, only & state.active)
            if placement is None:
                return {"Error": f"hetsched extender: pod {key} no longer fits on {args.Node}"}
            annotations = assignment_annotations(pod, placement) if placement.devices else {}
            # assumed at once, under the lock that chose the devices: a concurrent bind
            # never hands out the same device share (released again if the binding fails)
            bound = copy.deepcopy(pod)
            bound.setdefault("spec", {})["nodeName"] = args.Node
            bound.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
            cache.pods[key] = bound
            cache.assume(bound)
        try:
            won = cache.api.bind(
                args.PodNamespace, args.PodName, info.uid, args.Node, annotations or None
            )
        except ApiError as exc:
            self._unassume(key, bound, pod)
            return {"Error": f"binding {key} to {args.Node}: {exc}"}
        if won:
            return {"Error": ""}
        return self._lost(key, bound, pod, args.Node)

    def _unassume(self, key: str, bound: Obj, current: Obj) -> None:
        """Release an assumed binding and put ``current`` (the pod as it really is) in the
        cache in its place."""
        cache = self.cache
        assert cache is not None
        with cache.lock:
            if cache.pods.get(key) is bound:
                # two batches: the release must be done before the pod is accounted again
                cache.process([("pods", "DELETED", bound)])
                cache.process([("pods", "ADDED", current)])

    def _lost(self, key: str, bound: Obj, pod: Obj, node: str) -> Obj:
        """409: the pod was bound already, by an earlier try of ours whose answer was lost
        or by someone else. The server's pod says which; the cache follows the server."""
        cache = self.cache
        assert cache is not None
        try:
            current = cache.api.get_pod(*key.split("/", 1))
        except ApiError as exc:
            self._unassume(key, bound, pod)
            return {"Error": f"binding {key} to {node}: conflict, and reading it failed: {exc}"}
        if current is None:
            self._unassume(key, bound, pod)
            return {"Error": f"pod {key} is gone"}
        self._unassume(key, bound, current)
        where = str((current.get("spec") or {}).get("nodeName") or "")
        return _bound_answer(key, where, node) if where else {"Error": f"pod {key}: conflict"}

    def preempt(self, args: ExtenderPreemptionArgs) -> Obj:
        """Keep the nodes where evicting the proposed victims makes room for the pod's
        devices too; the victims are returned as given (in the Meta form)."""
        proposed: dict[str, list[str]] = {}
        if args.NodeNameToMetaVictims is not None:
            proposed = {n: [p.UID for p in v.Pods] for n, v in args.NodeNameToMetaVictims.items()}
        elif args.NodeNameToVictims is not None:
            proposed = {
                n: [str(_meta_of(p).get("uid", "")) for p in v.Pods]
                for n, v in args.NodeNameToVictims.items()
            }
        try:
            job = self._job(args.Pod)
        except TranslateError as exc:
            raise HTTPException(400, str(exc)) from None
        keep: dict[str, Obj] = {}
        cache = self.cache
        for node, uids in proposed.items():
            victims = {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": 0}
            if cache is None:
                keep[node] = victims
                continue
            with cache.lock:
                state = cache.core.view.cluster
                if node not in state.node_index:
                    continue
                fork = state.fork()
                for key, obj in cache.pods.items():
                    if str(_meta_of(obj).get("uid", "")) in uids and key in cache.owner:
                        job_id, task = cache.owner[key]
                        with contextlib.suppress(KeyError, AllocationError):
                            fork.release(TaskKey(job_id, task, cache._run.get(job_id, 1)))
                only = np.zeros(len(fork), np.bool_)
                only[fork.node_index[node]] = True
                ctx = CycleContext(fork, job, job.resources, what_if=True)
                if cache.core.framework.feasible(ctx, only & fork.active).any():
                    keep[node] = victims
        return {"NodeNameToMetaVictims": keep}


def _meta_of(obj: Any) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}


def _held_node(cache: PodScheduler, key: str) -> str:
    """The node where the cache holds ``key``'s allocation (an assumed binding whose pod
    the watch may still show unbound); empty when it holds none."""
    return cache.held_node(key)


def _bound_answer(key: str, where: str, asked: str) -> Obj:
    if where == asked:
        return {"Error": ""}
    return {"Error": f"pod {key} is already bound to {where}, not {asked}"}


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

    @app.exception_handler(TranslateError)
    def unreadable(request: Request, exc: TranslateError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

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
