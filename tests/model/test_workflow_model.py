"""Array indexes in Slurm's syntax, element ids, dependency cycles, and the spec fields:
checked against brute-force expansions (hypothesis) and hand-written cases."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.model.job_spec import parse_jobs, validate_jobs
from hetsched.model.spec_common import SpecError
from hetsched.model.workflow import (
    Dependency,
    Needs,
    OnUnmet,
    element_id,
    find_cycle,
    parse_array,
    split_element,
)


@pytest.mark.parametrize(
    ("text", "indexes", "cap"),
    [
        ("0-4", [0, 1, 2, 3, 4], None),
        ("1-7:2", [1, 3, 5, 7], None),
        ("1-8:3", [1, 4, 7], None),
        ("0,3,5", [0, 3, 5], None),
        ("0-2,10,20-30:5%2", [0, 1, 2, 10, 20, 25, 30], 2),
        ("7", [7], None),
    ],
)
def test_slurm_syntax(text: str, indexes: list[int], cap: int | None) -> None:
    spec = parse_array(text)
    assert list(spec) == indexes and len(spec) == len(indexes) and spec.cap == cap
    assert [spec.at(p) for p in range(len(spec))] == indexes
    assert parse_array(spec.describe()) == spec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0-9%0", "%N must be a whole number >= 1"),
        ("5-1", "a range goes up"),
        ("1-5:0", "a range goes up, with a step >= 1"),
        ("3,1", "parts must go up without overlapping"),
        ("0-5,5", "parts must go up without overlapping"),
        ("a-b", "expected ranges (0-9), steps (1-7:2) or indexes (0,3,5)"),
        ("0-10000000", "indexes go up to 9999999"),
        ("0-1000000", "at most 1000000 elements"),
    ],
)
def test_bad_arrays_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_array(text)
    assert message in str(info.value)


@st.composite
def ranges(draw: st.DrawFn) -> tuple[str, list[int]]:
    parts, expanded, low = [], [], 0
    for _ in range(draw(st.integers(1, 5))):
        start = low + draw(st.integers(0, 20))
        stop = start + draw(st.integers(0, 40))
        step = draw(st.integers(1, 7))
        parts.append(f"{start}-{stop}:{step}" if stop > start else str(start))
        expanded += list(range(start, stop + 1, step)) if stop > start else [start]
        low = (expanded[-1] if stop > start else start) + 1
    return ",".join(parts), expanded


@settings(max_examples=200, deadline=None)
@given(ranges(), st.integers(-5, 200))
def test_positions_membership_and_iteration_agree_with_the_expansion(
    case: tuple[str, list[int]], probe: int
) -> None:
    text, expanded = case
    spec = parse_array(text)
    assert list(spec) == expanded
    assert len(spec) == len(expanded)
    assert all(spec.at(p) == i for p, i in enumerate(expanded))
    assert (probe in spec) == (probe in expanded)


@settings(max_examples=100, deadline=None)
@given(st.text("abc[]0123456789", min_size=1, max_size=8), st.integers(0, 9_999_999))
def test_element_ids_split_back(parent: str, index: int) -> None:
    assert split_element(element_id(parent, index)) == (parent, index)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from("abcdef"), st.lists(st.sampled_from("abcdefg"), max_size=3)))
def test_a_cycle_is_found_exactly_when_there_is_one(edges: dict[str, list[str]]) -> None:
    cycle = find_cycle(edges)
    # reference: a graph has a cycle iff repeatedly removing nodes without successors
    # inside the graph leaves some
    left = {k: [v for v in vs if v in edges] for k, vs in edges.items()}
    while True:
        sinks = [k for k, vs in left.items() if not any(v in left for v in vs)]
        if not sinks:
            break
        for k in sinks:
            del left[k]
    assert (cycle is not None) == bool(left)
    if cycle is not None:
        assert cycle[0] == cycle[-1]
        assert all(b in edges[a] for a, b in itertools.pairwise(cycle))


def test_a_jobs_file_resolves_names_and_refuses_a_cycle() -> None:
    jobs = parse_jobs(
        {
            "jobs": [
                {"name": "prep", "id": "p1"},
                {"name": "train", "after": ["prep", {"job": "p1", "state": "ended"}]},
                {"name": "sweep", "array": "0-9%2", "after": ["elsewhere"], "on_unmet": "keep"},
            ]
        }
    )
    assert jobs[1].after == (Dependency("p1"), Dependency("p1", Needs.ENDED))
    assert jobs[2].after == (Dependency("elsewhere"),)  # not in the file: left to resolve
    assert jobs[2].on_unmet is OnUnmet.KEEP and jobs[2].array == parse_array("0-9%2")
    with pytest.raises(SpecError) as info:
        validate_jobs({"jobs": [{"name": "a", "after": ["a"]}]}, "f.yaml")
    assert info.value.errors == ["jobs: dependency cycle: a -> a"]
    assert str(info.value) == "f.yaml: jobs: dependency cycle: a -> a"
    # a name two jobs of the file share is no dependency (submit refuses it the same way)
    twice = [{"name": "a", "id": "a1"}, {"name": "a", "id": "a2"}, {"name": "b", "after": ["a"]}]
    with pytest.raises(SpecError) as info:
        validate_jobs({"jobs": twice})
    assert info.value.errors == [
        "jobs[2].after[0]: 2 jobs of this file are named 'a' (name one by its id)"
    ]
    twice[2]["after"] = ["a2"]
    assert parse_jobs({"jobs": twice})[2].after == (Dependency("a2"),)
    with pytest.raises(SpecError) as info:
        validate_jobs({"jobs": [{"name": "a", "array": "9-1"}]})
    assert info.value.errors == ["jobs[0].array: '9-1': a range goes up, with a step >= 1"]
