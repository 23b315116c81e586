"""Cluster and job specs of the plain, common shapes built without the pydantic models.

A spec file of thousands of nodes or jobs spent most of its validation in the models: every
value validated by the models, then read back attribute by attribute to build the core's
objects. The functions here accept only what they can decide at once: exact ``str``,
``int``, ``bool`` and ``list``/``dict`` values, the fields a plain node or job uses, within
their bounds. Anything else, valid or not (another field, a float for an int, an unknown
key, a value out of range, a duplicate name), is not decided here: a node or job of another
shape goes to the caller's ``slow`` function (its model), and a document that is not valid
as a whole makes them return None, so that the models validate it and report every error.
What they return is equal, value for value and type for type, to what the models build (a
hypothesis test compares the two on generated specs).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from hetsched.model.device import SHARE_UNITS, AttrValue, Device, Health, Node, Taint, TaintEffect
from hetsched.model.job import (
    DeviceChoice,
    DeviceFailurePolicy,
    DeviceRequest,
    Job,
    RestartPolicy,
    TaskRequest,
    Toleration,
)
from hetsched.model.quantity import parse_cpu, parse_memory
from hetsched.model.selector import SelectorError, compile_selector
from hetsched.model.speed import JobSpeed

__all__ = [
    "NO_SPEED",
    "DeviceGroup",
    "build_cluster",
    "build_jobs",
    "expand_node",
    "with_models",
]

#: the speed of a job that says nothing about it (immutable, so shared)
NO_SPEED = JobSpeed()

#: (class, vendor, model, attributes, count, health) of one group of a node's devices
DeviceGroup = tuple[str, str, str, Mapping[str, AttrValue], int, Health]


def expand_node(
    name: str,
    replicas: int | None,
    cpu_milli: int,
    memory_mib: int,
    labels: Mapping[str, str],
    taints: tuple[Taint, ...],
    groups: Iterable[DeviceGroup],
) -> list[Node]:
    """The nodes of one node entry: ``replicas`` of them (``{i}`` in the name numbered from
    0) or one; devices numbered per class across groups (two groups of 2 GPUs give
    gpu0..gpu3), one read-only attribute map per group, shared by its devices."""
    layout: list[tuple[tuple[str, ...], str, str, str, Mapping[str, AttrValue], Health]] = []
    per_class: dict[str, int] = {}
    for cls, vendor, model, attributes, count, health in groups:
        start = per_class.get(cls, 0)
        per_class[cls] = start + count
        frozen = MappingProxyType(dict(attributes))
        layout.append((_suffixes(cls, start, count), cls, vendor, model, frozen, health))
    names = [name] if replicas is None else [name.replace("{i}", str(i)) for i in range(replicas)]
    return [
        Node(
            n,
            cpu_milli,
            memory_mib,
            tuple([Device(n + at, c, v, m, a, h) for ats, c, v, m, a, h in layout for at in ats]),
            labels,
            taints,
        )
        for n in names
    ]


@lru_cache(maxsize=1024)
def _suffixes(cls: str, start: int, count: int) -> tuple[str, ...]:
    """``/gpu4``, ``/gpu5``, ...: what device ids add to their node's name."""
    return tuple(f"/{cls}{i}" for i in range(start, start + count))


@lru_cache(maxsize=4096)
def with_models(selector: str | None, models: tuple[str, ...]) -> str:
    """The selector of a choice with the model shorthand (many jobs name the same models)."""
    # JSON string literals are CEL string literals: a quote in a name cannot escape
    quoted = ", ".join(json.dumps(m) for m in models)
    by_model = f'device.attributes["model"] in [{quoted}]'
    return by_model if selector is None else f"({selector}) && {by_model}"


class _Undecided(Exception):
    """A value this module does not decide: the models do."""


#: a field that is absent (None is a value: one the models may refuse)
_NONE: Any = object()


_HEALTH = {h.value: h for h in Health}
_EFFECT = {e.value: e for e in TaintEffect}


def _text(value: Any, min_length: int = 0, max_length: int | None = None) -> str:
    if type(value) is not str or len(value) < min_length:
        raise _Undecided
    if max_length is not None and len(value) > max_length:
        raise _Undecided
    return value


def _whole(value: Any, low: int, high: int | None = None) -> int:
    if type(value) is not int or value < low or (high is not None and value > high):
        raise _Undecided
    return value


def _flag(value: Any) -> bool:
    if type(value) is not bool:
        raise _Undecided
    return value


def _texts(value: Any) -> dict[str, str]:
    if type(value) is not dict:
        raise _Undecided
    for key, item in value.items():
        if type(key) is not str or type(item) is not str:
            raise _Undecided
    return dict(value)


def _items(value: Any, min_length: int = 0) -> list[Any]:
    if type(value) is not list or len(value) < min_length:
        raise _Undecided
    return value


def _fields(value: Any, allowed: frozenset[str]) -> dict[str, Any]:
    if type(value) is not dict or not allowed.issuperset(value):
        raise _Undecided
    return value


_QUANTITY = (str, int, float)


def _quantity(parse: Callable[[Any], int], value: Any) -> int:
    if type(value) not in _QUANTITY:
        raise _Undecided
    try:
        return parse(value)
    except Exception:
        raise _Undecided from None


def _selector(expression: str) -> None:
    try:
        compile_selector(expression)
    except SelectorError:
        raise _Undecided from None


# -- clusters ---------------------------------------------------------------------------

_CLUSTER = frozenset({"nodes"})
_NODE = frozenset({"name", "replicas", "cpu", "memory", "labels", "taints", "devices"})
_TAINT = frozenset({"key", "value", "effect"})
_GROUP = frozenset({"class", "vendor", "model", "count", "attributes", "health"})
_ATTR_TYPES = (str, int, float, bool)


def _group(raw: Any) -> DeviceGroup:
    group = _fields(raw, _GROUP)
    attributes = group.get("attributes", {})
    if type(attributes) is not dict:
        raise _Undecided
    for key, value in attributes.items():
        if type(key) is not str or type(value) not in _ATTR_TYPES:
            raise _Undecided
    health = Health.HEALTHY
    if "health" in group:
        if type(group["health"]) is not str or group["health"] not in _HEALTH:
            raise _Undecided
        health = _HEALTH[group["health"]]
    return (
        _text(group.get("class"), 1),
        _text(group.get("vendor", "")),
        _text(group.get("model", "")),
        attributes,
        _whole(group.get("count", 1), 1, 1024),
        health,
    )


def _taint(raw: Any) -> Taint:
    taint = _fields(raw, _TAINT)
    effect = taint.get("effect", "NoSchedule")
    if type(effect) is not str or effect not in _EFFECT:
        raise _Undecided
    return Taint(_text(taint.get("key"), 1), _text(taint.get("value", "")), _EFFECT[effect])


def _node(raw: Any) -> list[Node]:
    if type(raw) is not dict or not _NODE.issuperset(raw):
        raise _Undecided
    name = raw.get("name")
    if type(name) is not str or not name or "cpu" not in raw or "memory" not in raw:
        raise _Undecided
    replicas = raw.get("replicas")
    if replicas is not None:
        _whole(replicas, 1, 100_000)
        if replicas > 1 and "{i}" not in name:
            raise _Undecided
    taints = raw.get("taints", _NONE)
    devices = raw.get("devices", _NONE)
    return expand_node(
        name,
        replicas,
        _quantity(parse_cpu, raw["cpu"]),
        _quantity(parse_memory, raw["memory"]),
        _texts(raw["labels"]) if "labels" in raw else {},
        () if taints is _NONE else tuple([_taint(t) for t in _items(taints)]),
        () if devices is _NONE else [_group(g) for g in _items(devices)],
    )


def build_cluster(data: Any, slow: Callable[[Any], list[Node] | None]) -> list[Node] | None:
    """The nodes of a cluster document, or None when the models must decide. ``slow``
    builds the nodes of one entry of another shape (None when that entry is invalid)."""
    try:
        entries = _items(_fields(data, _CLUSTER).get("nodes"), 1)
    except _Undecided:
        return None
    nodes: list[Node] = []
    for raw in entries:
        try:
            nodes += _node(raw)
        except _Undecided:
            built = slow(raw)
            if built is None:
                return None
            nodes += built
    if len({n.name for n in nodes}) != len(nodes):
        return None  # a duplicate name: the models name it
    return nodes


# -- jobs -------------------------------------------------------------------------------

_JOBS = frozenset({"jobs"})
_JOB = frozenset(
    {"name", "id", "user", "queue", "priority", "replicas", "gang", "preemptible", "best_effort"}
    | {"resources"}
)
_RESOURCES = frozenset({"cpu", "memory", "devices", "node_selector", "tolerations"})
_CHOICE = frozenset({"class", "count", "share", "selector", "model"})
_REQUEST = _CHOICE | {"alternatives"}
_TOLERATION = frozenset({"key", "value", "effect"})


def _choice(choice: dict[str, Any]) -> DeviceChoice:
    cls, selector = choice.get("class"), choice.get("selector")
    count, share = choice.get("count", 1), choice.get("share", SHARE_UNITS)
    model = choice.get("model")
    models = None
    if model is not None:
        models = (model,) if type(model) is str else tuple(_items(model))
        if not all(type(m) is str for m in models):
            raise _Undecided
    # the exact types before the cache: a cached 1 must not answer for True or 1.0
    if (
        type(cls) is not str
        or type(count) is not int
        or type(share) is not int
        or (selector is not None and type(selector) is not str)
    ):
        raise _Undecided
    return _plain_choice(cls, count, share, selector, models)


@lru_cache(maxsize=4096)
def _plain_choice(
    cls: str, count: int, share: int, selector: str | None, models: tuple[str, ...] | None
) -> DeviceChoice:
    """A choice from its fields; a spec file repeats few distinct ones thousands of times
    (what is undecided raises every time: exceptions are not cached)."""
    if not cls or not 1 <= count <= 1024 or not 1 <= share <= SHARE_UNITS:
        raise _Undecided
    if share < SHARE_UNITS and count != 1:
        raise _Undecided
    if selector is not None:
        _selector(selector)
    if models is not None:
        selector = with_models(selector, models)
        _selector(selector)
    return DeviceChoice(cls, count, share, selector)


@lru_cache(maxsize=4096)
def _single(choice: DeviceChoice) -> DeviceRequest:
    return DeviceRequest((choice,))


def _request(raw: Any) -> DeviceRequest:
    request = _fields(raw, _REQUEST)
    if "alternatives" not in request:
        return _single(_choice(request))
    alternatives = [_choice(_fields(a, _CHOICE)) for a in _items(request["alternatives"])]
    return DeviceRequest((_choice(request), *alternatives))


def _toleration(raw: Any) -> Toleration:
    toleration = _fields(raw, _TOLERATION)
    value = toleration.get("value")
    effect = toleration.get("effect")
    if effect is not None and (type(effect) is not str or effect not in _EFFECT):
        raise _Undecided
    return Toleration(
        _text(toleration.get("key", "")),
        None if value is None else _text(value),
        None if effect is None else _EFFECT[effect],
    )


_NO_REQUEST = TaskRequest(0, 0, (), {}, ())


def _resources(raw: Any, plain: dict[Any, TaskRequest]) -> TaskRequest:
    """The request of a job's ``resources``; ``plain`` holds those already built without a
    node selector or tolerations by their raw values (the same value of the same type
    parses to the same quantity), so that a repeated one is not parsed and hashed again."""
    if type(raw) is not dict or not _RESOURCES.issuperset(raw):
        raise _Undecided
    cpu, memory = raw.get("cpu", _NONE), raw.get("memory", _NONE)
    if (cpu is not _NONE and type(cpu) not in _QUANTITY) or (
        memory is not _NONE and type(memory) not in _QUANTITY
    ):
        raise _Undecided  # before the key: a list would not even hash
    devices = raw.get("devices", _NONE)
    requests = () if devices is _NONE else tuple([_request(d) for d in _items(devices)])
    key = None
    if "node_selector" not in raw and "tolerations" not in raw:
        key = (type(cpu), cpu, type(memory), memory, requests)
        found = plain.get(key)
        if found is not None:
            return found
    tolerations = raw.get("tolerations", _NONE)
    built = TaskRequest(
        0 if cpu is _NONE else _quantity(parse_cpu, cpu),
        0 if memory is _NONE else _quantity(parse_memory, memory),
        requests,
        _texts(raw["node_selector"]) if "node_selector" in raw else {},
        () if tolerations is _NONE else tuple([_toleration(t) for t in _items(tolerations)]),
    )
    if key is not None:
        plain[key] = built
    return built


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _job(raw: Any, requests: dict[TaskRequest, TaskRequest], plain: dict[Any, TaskRequest]) -> Job:
    if type(raw) is not dict or not _JOB.issuperset(raw):
        raise _Undecided
    name = raw.get("name")
    if type(name) is not str or not 1 <= len(name) <= 253:
        raise _Undecided
    job_id = raw.get("id")
    if job_id is not None:
        _text(job_id, 1, 253)
    replicas = raw.get("replicas", 1)
    if replicas != 1:
        _whole(replicas, 1, 100_000)
    gang = raw.get("gang")
    if gang is not None and _whole(gang, 1) > replicas:
        raise _Undecided
    user, queue = raw.get("user", "default"), raw.get("queue", "default")
    priority = raw.get("priority", 0)
    preemptible, best_effort = raw.get("preemptible", True), raw.get("best_effort", False)
    if (
        type(user) is not str
        or type(queue) is not str
        or type(priority) is not int
        or not _INT64[0] <= priority <= _INT64[1]
        or type(preemptible) is not bool
        or type(best_effort) is not bool
        or type(replicas) is not int
    ):
        raise _Undecided
    resources = _resources(raw["resources"], plain) if "resources" in raw else _NO_REQUEST
    # positional, in Job's field order (id, resources, name, user, queue, priority,
    # replicas, gang, preemptible, estimated and max runtime, restart policy, max
    # restarts, submit time, device failure policy, best effort, speed)
    return Job(
        job_id or name,
        requests.setdefault(resources, resources),
        name,
        user,
        queue,
        priority,
        replicas,
        gang,
        preemptible,
        None,
        None,
        RestartPolicy.NEVER,
        0,
        0.0,
        DeviceFailurePolicy.REQUEUE,
        best_effort,
        NO_SPEED,
    )


def build_jobs(
    data: Any, slow: Callable[[Any, dict[TaskRequest, TaskRequest]], Job | None]
) -> list[Job] | None:
    """The jobs of a jobs document, or None when the models must decide. ``slow`` builds a
    job of another shape (None when it is invalid) with the same shared requests: jobs of
    equal requests share one TaskRequest object."""
    try:
        entries = _items(_fields(data, _JOBS).get("jobs"), 1)
    except _Undecided:
        return None
    requests: dict[TaskRequest, TaskRequest] = {}
    plain: dict[Any, TaskRequest] = {}
    jobs: list[Job] = []
    for raw in entries:
        try:
            jobs.append(_job(raw, requests, plain))
        except _Undecided:
            built = slow(raw, requests)
            if built is None:
                return None
            jobs.append(built)
    if len({j.id for j in jobs}) != len(jobs):
        return None  # a duplicate id: the models name it
    return jobs
