"""The plain path of spec files (hetsched.model.spec_build) against the pydantic models:
the same nodes and jobs, value for value and type for type, and the same errors."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from hetsched.model.spec_build import build_cluster, build_jobs
from hetsched.model.specs import (
    ClusterSpec,
    JobsSpec,
    SpecError,
    format_errors,
    parse_cluster,
    parse_jobs,
)

# -- values: mostly what a spec file holds, sometimes what it should not ---------------

_ODD = st.sampled_from([None, True, False, 0, -1, 1.0, 2.5, "", "x", [], {}, float("nan")])


def _mostly(good: st.SearchStrategy[Any], *odd: Any) -> Any:
    """A valid value (``good``) 23 times in 24, else an invalid or unusual one (``odd``, or
    a value of the wrong kind): a document is valid often enough that the plain path builds
    it, and invalid often enough that the errors are compared."""
    return st.integers(0, 47).flatmap(
        lambda i: good if i > 1 else st.sampled_from(odd) if odd and i == 1 else _ODD
    )


_TEXT = _mostly(st.sampled_from(["a", "gpu", "n-{i}", "A100", "x" * 253]), "x" * 254)
_COUNT = _mostly(st.sampled_from([1, 1, 1, 2, 4, 1024]), 1025, 2**70)
_REPLICAS = _mostly(st.sampled_from([1, 2, 3, 100_000]), 100_001)
_PRIORITY = _mostly(st.sampled_from([0, 1, -5, 2**63 - 1, -(2**63)]), 2**63, -(2**63) - 1)
_QUANTITY = _mostly(
    st.one_of(
        st.sampled_from(["4", "500m", "16Gi", "1.5", "1e3", " 2 ", "1Ki"]),
        st.integers(0, 10**6),
        st.floats(0, 1e6),
    ),
    "lots",
    "-1Gi",
    float("inf"),
)
_ATTR = _mostly(st.one_of(st.text(max_size=3), st.integers(), st.floats(), st.booleans()))
_KEY = st.integers(0, 23).flatmap(  # hashable, whatever it is
    lambda i: st.sampled_from([1, True, None]) if i == 0 else st.sampled_from(["zone", "rack"])
)
_TEXTS = _mostly(st.dictionaries(_KEY, _TEXT, max_size=2))
_EXTRA = st.sampled_from(["colour", "cpu_milli", "device_class", "memory_mib", "name"])


def _entry(
    required: dict[str, Any], optional: dict[str, Any], rare: dict[str, Any] | None = None
) -> Any:
    """A dict of the fields, some optional ones left out; now and then with an extra key or
    one of the ``rare`` fields (those the plain path leaves to the models); rarely not a
    dict at all."""
    entry = st.fixed_dictionaries(required, optional=optional)
    extra = st.tuples(entry, _EXTRA, _TEXT).map(lambda e: {**e[0], e[1]: e[2]})
    with_rare = st.tuples(entry, st.fixed_dictionaries({}, optional=rare or {}))
    branches = [_ODD, extra, with_rare.map(lambda e: {**e[0], **e[1]})]
    return st.integers(0, 39).flatmap(lambda i: branches[i] if i < 3 else entry)


_GROUP = _entry(
    {"class": _mostly(st.sampled_from(["gpu", "fpga"]))},
    {
        "vendor": _TEXT,
        "model": _TEXT,
        "count": _COUNT,
        "attributes": _mostly(st.dictionaries(st.sampled_from(["m", "memory_gib"]), _ATTR)),
        "health": _mostly(st.sampled_from(["healthy", "unhealthy"]), "HEALTHY"),
    },
)
_TAINT = _entry(
    {"key": _mostly(st.sampled_from(["k", "gpu"]))},
    {"value": _TEXT, "effect": _mostly(st.sampled_from(["NoSchedule", "NoExecute"]), "no")},
)
_NODE = _entry(
    {
        "name": _mostly(st.sampled_from([f"n{i}-{{i}}" for i in range(50)]), "n"),
        "cpu": _QUANTITY,
        "memory": _QUANTITY,
    },
    {
        "replicas": _mostly(st.sampled_from([1, 2, 3, None]), 0, 100_001),
        "labels": _TEXTS,
        "taints": _mostly(st.lists(_TAINT, max_size=2)),
        "devices": _mostly(st.lists(_GROUP, min_size=1, max_size=3)),
    },
)
_SELECTOR = _mostly(
    st.sampled_from(['device.attributes["memory_gib"] >= 32', "true", None]),
    'device.attributes["m"] in [',
)
_CHOICE_FIELDS: dict[str, Any] = {
    "count": _COUNT,
    "share": _mostly(st.sampled_from([250, 500, 1000]), 0, 1001),
    "selector": _SELECTOR,
    "model": _mostly(st.sampled_from(["A100", ["A100", "H100"], [], None]), ["V100", 3]),
}
_CHOICE = _entry({"class": _mostly(st.just("gpu"))}, _CHOICE_FIELDS)
_REQUEST = _entry(
    {"class": _mostly(st.just("gpu"))},
    {**_CHOICE_FIELDS, "alternatives": _mostly(st.lists(_CHOICE, max_size=2))},
)
_TOLERATION = _entry(
    {}, {"key": _TEXT, "value": _mostly(st.sampled_from(["v", None])), "effect": _TEXT}
)
_RESOURCES = _entry(
    {"devices": _mostly(st.lists(_REQUEST, min_size=1, max_size=2))},
    {
        "cpu": _QUANTITY,
        "memory": _QUANTITY,
        "node_selector": _TEXTS,
        "tolerations": _mostly(st.lists(_TOLERATION, max_size=2)),
    },
)
_JOB = _entry(
    {"name": _mostly(st.sampled_from([f"j{i}" for i in range(30)])), "resources": _RESOURCES},
    {
        "id": _mostly(st.sampled_from(["x" * 253, None]), "x" * 254),
        "user": _TEXT,
        "queue": _TEXT,
        "priority": _PRIORITY,
        "replicas": _REPLICAS,
        "gang": _mostly(st.sampled_from([None, 1, 2]), 0, 5),
        "preemptible": _mostly(st.booleans(), "maybe", "yes"),
        "best_effort": _mostly(st.booleans()),
    },
    {
        "max_runtime": st.sampled_from(["2h", 90, "soon"]),
        "speed": st.sampled_from([{"A100": 2.0}, "A100:1", {"A100": -1}]),
        "checkpoint": st.sampled_from([{"interval": "10m"}, {"notice": "2h"}]),
    },
)


def _document(key: str, entries: st.SearchStrategy[Any]) -> Any:
    document = st.lists(entries, min_size=1, max_size=4).map(lambda e: {key: e})
    odd = st.lists(entries, max_size=2).map(lambda e: {key: e, "extra": 1})
    return st.integers(0, 23).flatmap(
        lambda i: (
            st.one_of(odd, st.sampled_from([{key: []}, {key: None}]), _ODD) if i == 0 else document
        )
    )


def _outcome(build: Any) -> tuple[str, Any]:
    try:
        return ("built", repr(build()))
    except SpecError as exc:
        return ("refused", exc.errors)


def _by_models(model: Any, document: Any) -> tuple[str, Any]:
    """What the models alone make of ``document``: the spec files' behaviour before the
    plain path existed."""
    try:
        return ("built", repr(model.model_validate(document).build()))
    except ValidationError as exc:
        return ("refused", format_errors(exc))
    except SpecError as exc:
        return ("refused", exc.errors)


_SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(_document("nodes", _NODE))
def test_clusters_build_as_the_models_build_them(document: Any) -> None:
    assert _outcome(lambda: parse_cluster(document)) == _by_models(ClusterSpec, document)


@_SETTINGS
@given(_document("jobs", _JOB))
def test_jobs_build_as_the_models_build_them(document: Any) -> None:
    assert _outcome(lambda: parse_jobs(document)) == _by_models(JobsSpec, document)


@_SETTINGS
@given(st.lists(_JOB, min_size=1, max_size=4), st.lists(_JOB, min_size=1, max_size=4))
def test_jobs_of_equal_requests_share_one_request(first: Any, second: Any) -> None:
    try:
        jobs = parse_jobs({"jobs": [*first, *second]})
    except SpecError:
        return
    by_value: dict[Any, Any] = {}
    for job in jobs:
        assert by_value.setdefault(job.resources, job.resources) is job.resources


def _never(*_: Any) -> Any:
    raise AssertionError("the plain path left a plain entry to the model")


def test_plain_specs_take_the_plain_path() -> None:
    cluster = {
        "nodes": [
            {
                "name": "a-{i}",
                "replicas": 2,
                "cpu": "96",
                "memory": "1Ti",
                "labels": {"zone": "z1"},
                "taints": [{"key": "k", "effect": "NoExecute"}],
                "devices": [
                    {"class": "gpu", "vendor": "nvidia", "model": "A100", "count": 2},
                    {"class": "gpu", "model": "T4", "attributes": {"memory_gib": 16}},
                ],
            }
        ]
    }
    nodes = build_cluster(cluster, _never)
    assert nodes is not None
    assert [d.id for d in nodes[1].devices] == ["a-1/gpu0", "a-1/gpu1", "a-1/gpu2"]
    assert repr(nodes) == repr(ClusterSpec.model_validate(cluster).build())
    gpu = {"class": "gpu", "count": 2, "model": ["A100", "H100"]}
    jobs = {
        "jobs": [
            {"name": "a", "user": "u", "priority": 2, "resources": {"cpu": 4, "devices": [gpu]}},
            {"name": "b", "gang": 1, "replicas": 2, "resources": {"cpu": 4, "devices": [gpu]}},
            {"name": "c", "resources": {"tolerations": [{"key": "k"}], "node_selector": {}}},
        ]
    }
    built = build_jobs(jobs, _never)
    assert built is not None
    assert repr(built) == repr(JobsSpec.model_validate(jobs).build())
    assert built[0].resources is built[1].resources


@pytest.mark.parametrize(
    ("document", "error"),
    [
        ({"jobs": [{"name": "j", "priority": True}]}, None),
        (
            {"jobs": [{"name": "j", "resources": {"devices": [{"class": "gpu", "count": True}]}}]},
            None,
        ),
        ({"jobs": [{"name": "j", "preemptible": "maybe"}]}, "jobs[0].preemptible: Input should be"),
        ({"jobs": [{"name": "j", "replicas": 2**70}]}, "jobs[0].replicas: Input should be less"),
        ({"jobs": [{"name": "j", "user": None}]}, "jobs[0].user: Input should be a valid string"),
    ],
)
def test_values_of_another_type_are_the_models_to_decide(document: Any, error: str | None) -> None:
    """After the plain path built (and cached) a plain choice, values of another type (a
    bool for an int, a string for a bool, an int beyond int64, null) get what the models
    make of them."""
    parse_jobs(
        {"jobs": [{"name": "j", "priority": 1, "resources": {"devices": [{"class": "gpu"}]}}]}
    )
    assert _outcome(lambda: parse_jobs(document)) == _by_models(JobsSpec, document)
    if error is not None:
        with pytest.raises(SpecError, match=re.escape(error)):
            parse_jobs(document)


_GPU = {"class": "gpu"}


def _node(**fields: Any) -> dict[str, Any]:
    return {"nodes": [{"name": "n-{i}", "cpu": 4, "memory": "4Gi", **fields}]}


def _job_with(device: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    return {
        "jobs": [{"name": "j", "resources": {"devices": [{**_GPU, **(device or {})}]}, **fields}]
    }


#: each limit of the plain path, on both sides
_EDGES = [
    ("cluster", _node(devices=[{**_GPU, "count": 1024}])),
    ("cluster", _node(devices=[{**_GPU, "count": 1025}])),
    ("cluster", _node(devices=[{**_GPU, "count": 0}])),
    ("cluster", _node(devices=[{**_GPU, "count": True}])),
    ("cluster", _node(devices=[{**_GPU, "health": "HEALTHY"}])),
    ("cluster", _node(devices=[{**_GPU, "attributes": {"m": None}}])),
    ("cluster", _node(devices=[{**_GPU, "class": ""}])),
    ("cluster", _node(replicas=100_000, devices=[])),
    ("cluster", _node(replicas=100_001)),
    ("cluster", {"nodes": [{"name": "n", "replicas": 2, "cpu": 4, "memory": "4Gi"}]}),
    ("cluster", {"nodes": [{"name": "n", "replicas": 1, "cpu": 4, "memory": "4Gi"}]}),
    ("cluster", _node(taints=[{"key": "k", "effect": "no"}])),
    ("cluster", _node(taints=[{"key": ""}])),
    ("cluster", _node(labels={1: "a"})),
    ("cluster", _node(labels={"a": 1})),
    ("cluster", _node(cpu=None)),
    ("cluster", _node(cpu=float("inf"))),
    ("cluster", _node(memory="1.5Gi", cpu="250m")),
    ("jobs", _job_with({"count": 1024})),
    ("jobs", _job_with({"count": 1025})),
    ("jobs", _job_with({"share": 1})),
    ("jobs", _job_with({"share": 0})),
    ("jobs", _job_with({"share": 1001})),
    ("jobs", _job_with({"share": 250, "count": 2})),
    ("jobs", _job_with({"share": 250, "count": 1})),
    ("jobs", _job_with({"count": 2.0})),
    ("jobs", _job_with({"model": ["A100", 3]})),
    ("jobs", _job_with({"model": []})),
    ("jobs", _job_with({"selector": 'device.attributes["m"] in ['})),
    ("jobs", _job_with({"alternatives": [{"class": "gpu", "share": 500}]})),
    ("jobs", _job_with({"alternatives": [{"class": "gpu", "alternatives": []}]})),
    ("jobs", _job_with(name="x" * 253)),
    ("jobs", _job_with(name="x" * 254)),
    ("jobs", _job_with(id="x" * 254)),
    ("jobs", _job_with(id="")),
    ("jobs", _job_with(replicas=100_000)),
    ("jobs", _job_with(replicas=100_001)),
    ("jobs", _job_with(replicas=2, gang=2)),
    ("jobs", _job_with(replicas=2, gang=3)),
    ("jobs", _job_with(gang=0)),
    ("jobs", _job_with(priority=2**63 - 1)),
    ("jobs", _job_with(priority=2**63)),
    ("jobs", _job_with(priority=-(2**63))),
    ("jobs", _job_with(priority=-(2**63) - 1)),
    ("jobs", _job_with(priority=1.0)),
    ("jobs", _job_with(preemptible=1)),
    ("jobs", _job_with(best_effort="true")),
    ("jobs", _job_with(user=None)),
    ("jobs", _job_with(resources={"tolerations": [{"effect": "no"}]})),
    ("jobs", _job_with(resources={"tolerations": [{"value": None, "effect": None}]})),
    ("jobs", _job_with(resources={"node_selector": {"zone": 1}})),
    ("jobs", _job_with(resources={"cpu": []})),
    ("jobs", _job_with(resources=None)),
    ("jobs", {"jobs": [{"name": "j"}, {"name": "k", "id": "j"}]}),
]


@pytest.mark.parametrize(("kind", "document"), _EDGES)
def test_each_limit_is_the_models_limit(kind: str, document: Any) -> None:
    if kind == "cluster":
        assert _outcome(lambda: parse_cluster(document)) == _by_models(ClusterSpec, document)
    else:
        assert _outcome(lambda: parse_jobs(document)) == _by_models(JobsSpec, document)
