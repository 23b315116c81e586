"""The limits of spec files, as the pydantic models state them: a table of literal cases
at each edge, and generated documents (mostly valid, sometimes not) that build the same
every time or name each problem with its field path."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetsched.model.specs import SpecError, parse_cluster, parse_jobs

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
    one of the ``rare`` fields (of other notations: durations, speeds, checkpoints); rarely
    not a dict at all."""
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


_SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: ``path: message``, the path empty for the document as a whole
_ERROR = re.compile(r"^[\w.\[\]{}-]*: \S")


def _named(outcome: tuple[str, Any]) -> bool:
    return outcome[0] == "built" or all(_ERROR.match(e) for e in outcome[1])


@_SETTINGS
@given(_document("nodes", _NODE))
def test_clusters_build_the_same_every_time_or_name_each_problem(document: Any) -> None:
    first = _outcome(lambda: parse_cluster(document))
    assert _outcome(lambda: parse_cluster(document)) == first
    assert _named(first), first


@_SETTINGS
@given(_document("jobs", _JOB))
def test_jobs_build_the_same_every_time_or_name_each_problem(document: Any) -> None:
    first = _outcome(lambda: parse_jobs(document))
    assert _outcome(lambda: parse_jobs(document)) == first
    assert _named(first), first


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


def test_a_plain_cluster_and_jobs_build() -> None:
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
    nodes = parse_cluster(cluster)
    assert [n.name for n in nodes] == ["a-0", "a-1"]
    assert [d.id for d in nodes[1].devices] == ["a-1/gpu0", "a-1/gpu1", "a-1/gpu2"]
    assert [d.model for d in nodes[1].devices] == ["A100", "A100", "T4"]
    assert nodes[0].cpu_milli == 96_000 and nodes[0].memory_mib == 1 << 20
    gpu = {"class": "gpu", "count": 2, "model": ["A100", "H100"]}
    jobs = parse_jobs(
        {
            "jobs": [
                {
                    "name": "a",
                    "user": "u",
                    "priority": 2,
                    "resources": {"cpu": 4, "devices": [gpu]},
                },
                {"name": "b", "gang": 1, "replicas": 2, "resources": {"cpu": 4, "devices": [gpu]}},
                {"name": "c", "resources": {"tolerations": [{"key": "k"}], "node_selector": {}}},
            ]
        }
    )
    assert jobs[0].resources is jobs[1].resources
    (choice,) = jobs[0].resources.devices[0].choices
    assert choice.selector == 'device.attributes["model"] in ["A100", "H100"]'
    assert (jobs[1].gang, jobs[1].replicas, jobs[2].resources.tolerations[0].key) == (1, 2, "k")


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
def test_a_value_of_another_type_is_not_answered_from_a_cache(
    document: Any, error: str | None
) -> None:
    """After a plain choice was built (and cached), values of another type (a bool for an
    int, a string for a bool, an int beyond the bound, null) are validated as themselves."""
    parse_jobs(
        {"jobs": [{"name": "j", "priority": 1, "resources": {"devices": [{"class": "gpu"}]}}]}
    )
    if error is None:
        (job,) = parse_jobs(document)
        assert type(job.priority) is int
        assert all(type(d.primary.count) is int for d in job.resources.devices)
    else:
        with pytest.raises(SpecError, match=re.escape(error)):
            parse_jobs(document)


_GPU = {"class": "gpu"}


def _node(**fields: Any) -> dict[str, Any]:
    return {"nodes": [{"name": "n-{i}", "cpu": 4, "memory": "4Gi", **fields}]}


def _job_with(device: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    return {
        "jobs": [{"name": "j", "resources": {"devices": [{**_GPU, **(device or {})}]}, **fields}]
    }


_EFFECTS = "'NoSchedule', 'PreferNoSchedule' or 'NoExecute'"

#: (kind, document, its first error or None when it builds): each limit, on both sides
_EDGES = [
    ("cluster", _node(devices=[{**_GPU, "count": 1024}]), None),
    (
        "cluster",
        _node(devices=[{**_GPU, "count": 1025}]),
        "nodes[0].devices[0].count: Input should be less than or equal to 1024",
    ),
    (
        "cluster",
        _node(devices=[{**_GPU, "count": 0}]),
        "nodes[0].devices[0].count: Input should be greater than or equal to 1",
    ),
    ("cluster", _node(devices=[{**_GPU, "count": True}]), None),
    (
        "cluster",
        _node(devices=[{**_GPU, "health": "HEALTHY"}]),
        "nodes[0].devices[0].health: Input should be 'healthy' or 'unhealthy'",
    ),
    (
        "cluster",
        _node(devices=[{**_GPU, "attributes": {"m": None}}]),
        "nodes[0].devices[0].attributes.m: Input should be a valid string",
    ),
    (
        "cluster",
        _node(devices=[{**_GPU, "class": ""}]),
        "nodes[0].devices[0].class: String should have at least 1 character",
    ),
    ("cluster", _node(replicas=100_000, devices=[]), None),
    (
        "cluster",
        _node(replicas=100_001),
        "nodes[0].replicas: Input should be less than or equal to 100000",
    ),
    (
        "cluster",
        {"nodes": [{"name": "n", "replicas": 2, "cpu": 4, "memory": "4Gi"}]},
        ": node 'n': replicas > 1 needs '{i}' in the name",
    ),
    ("cluster", {"nodes": [{"name": "n", "replicas": 1, "cpu": 4, "memory": "4Gi"}]}, None),
    (
        "cluster",
        _node(taints=[{"key": "k", "effect": "no"}]),
        "nodes[0].taints[0].effect: Input should be " + _EFFECTS,
    ),
    (
        "cluster",
        _node(taints=[{"key": ""}]),
        "nodes[0].taints[0].key: String should have at least 1 character",
    ),
    ("cluster", _node(labels={1: "a"}), "nodes[0].labels[1].[key]: Input should be a valid string"),
    ("cluster", _node(labels={"a": 1}), "nodes[0].labels.a: Input should be a valid string"),
    ("cluster", _node(cpu=None), "nodes[0].cpu: expected a quantity, got None"),
    ("cluster", _node(cpu=float("inf")), "nodes[0].cpu: expected a finite quantity, got inf"),
    ("cluster", _node(memory="1.5Gi", cpu="250m"), None),
    ("jobs", _job_with({"count": 1024}), None),
    (
        "jobs",
        _job_with({"count": 1025}),
        "jobs[0].resources.devices[0].count: Input should be less than or equal to 1024",
    ),
    ("jobs", _job_with({"share": 1}), None),
    ("jobs", _job_with({"share": 0}), "jobs[0].resources.devices[0].share: must be 1..1000, got 0"),
    (
        "jobs",
        _job_with({"share": 1001}),
        "jobs[0].resources.devices[0].share: must be 1..1000, got 1001",
    ),
    (
        "jobs",
        _job_with({"share": 250, "count": 2}),
        "jobs[0].resources.devices[0]: a share below 1000 needs count 1, got count 2",
    ),
    ("jobs", _job_with({"share": 250, "count": 1}), None),
    ("jobs", _job_with({"count": 2.0}), None),
    (
        "jobs",
        _job_with({"model": ["A100", 3]}),
        "jobs[0].resources.devices[0].model: Input should be a valid string",
    ),
    ("jobs", _job_with({"model": []}), None),
    (
        "jobs",
        _job_with({"selector": 'device.attributes["m"] in ['}),
        "jobs[0].resources.devices[0].selector: invalid selector "
        + """'device.attributes["m"] in [': device.attributes["m"] in [ ^""",
    ),
    ("jobs", _job_with({"alternatives": [{"class": "gpu", "share": 500}]}), None),
    (
        "jobs",
        _job_with({"alternatives": [{"class": "gpu", "alternatives": []}]}),
        "jobs[0].resources.devices[0].alternatives[0].alternatives: Extra inputs are not permitted",
    ),
    ("jobs", _job_with(name="x" * 253), None),
    ("jobs", _job_with(name="x" * 254), "jobs[0].name: String should have at most 253 characters"),
    ("jobs", _job_with(id="x" * 254), "jobs[0].id: String should have at most 253 characters"),
    ("jobs", _job_with(id=""), "jobs[0].id: String should have at least 1 character"),
    ("jobs", _job_with(replicas=100_000), None),
    (
        "jobs",
        _job_with(replicas=100_001),
        "jobs[0].replicas: Input should be less than or equal to 100000",
    ),
    ("jobs", _job_with(replicas=2, gang=2), None),
    ("jobs", _job_with(replicas=2, gang=3), "jobs[0]: gang must be 1..replicas (2), got 3"),
    ("jobs", _job_with(gang=0), "jobs[0].gang: Input should be greater than or equal to 1"),
    ("jobs", _job_with(priority=2**63 - 1), None),
    ("jobs", _job_with(priority=2**63), None),
    ("jobs", _job_with(priority=-(2**63)), None),
    ("jobs", _job_with(priority=-(2**63) - 1), None),
    ("jobs", _job_with(priority=1.0), None),
    ("jobs", _job_with(preemptible=1), None),
    ("jobs", _job_with(best_effort="true"), None),
    ("jobs", _job_with(user=None), "jobs[0].user: Input should be a valid string"),
    (
        "jobs",
        _job_with(resources={"tolerations": [{"effect": "no"}]}),
        "jobs[0].resources.tolerations[0].effect: Input should be " + _EFFECTS,
    ),
    ("jobs", _job_with(resources={"tolerations": [{"value": None, "effect": None}]}), None),
    (
        "jobs",
        _job_with(resources={"node_selector": {"zone": 1}}),
        "jobs[0].resources.node_selector.zone: Input should be a valid string",
    ),
    (
        "jobs",
        _job_with(resources={"cpu": []}),
        "jobs[0].resources.cpu: expected a quantity, got []",
    ),
    (
        "jobs",
        _job_with(resources=None),
        "jobs[0].resources: Input should be a valid dictionary or instance of ResourcesSpec",
    ),
    (
        "jobs",
        {"jobs": [{"name": "j"}, {"name": "k", "id": "j"}]},
        "jobs[1]: duplicate job id 'j' (first at jobs[0])",
    ),
]


@pytest.mark.parametrize(("kind", "document", "error"), _EDGES)
def test_each_limit(kind: str, document: Any, error: str | None) -> None:
    parse = parse_cluster if kind == "cluster" else parse_jobs
    if error is None:
        assert parse(document)
    else:
        with pytest.raises(SpecError) as refused:
            parse(document)
        assert refused.value.errors[0] == error
