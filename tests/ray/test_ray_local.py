"""`hetsched ray local`: the node list, and a real cluster started and stopped in a namespace."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_fixtures import HERE, check, require_namespaces

from hetsched.ray.local import LocalNodeSpec, parse_nodes
from hetsched.ray.testing import run_isolated


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a100:2", [LocalNodeSpec("a100-0", "A100", 2)]),
        (
            "a100:2,t4:1,cpu:0",
            [
                LocalNodeSpec("a100-0", "A100", 2),
                LocalNodeSpec("t4-0", "T4", 1),
                LocalNodeSpec("cpu-0", None, 0),
            ],
        ),
        (
            " a100:2 , A100:1 ,cpu:0,cpu:0",
            [
                LocalNodeSpec("a100-0", "A100", 2),
                LocalNodeSpec("a100-1", "A100", 1),
                LocalNodeSpec("cpu-0", None, 0),
                LocalNodeSpec("cpu-1", None, 0),
            ],
        ),
        ("mi300x:8", [LocalNodeSpec("mi300x-0", "MI300X", 8)]),
    ],
)
def test_node_lists(text: str, expected: list[LocalNodeSpec]) -> None:
    assert parse_nodes(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected MODEL:GPUS entries"),
        ("a100", "entry 1 ('a100'): expected MODEL:GPUS"),
        ("a100:2,", "entry 2 (''): expected MODEL:GPUS"),
        (":2", "entry 1 (':2'): expected MODEL:GPUS"),
        ("a100:two", "GPUS must be a whole number, got 'two'"),
        ("a100:0", "a a100 node needs 1..64 GPUs (cpu:0 has none)"),
        ("t4:65", "a t4 node needs 1..64 GPUs"),
        ("cpu:1", "a cpu node has no GPUs; write cpu:0"),
        ("a/100:1", "the model must be 1-40 letters"),
        (",".join(["cpu:0"] * 17), "at most 16 nodes, got 17"),
    ],
)
def test_bad_node_lists_say_which_entry_and_what_was_expected(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_nodes(text)


@given(
    st.lists(
        st.tuples(st.sampled_from(["a100", "t4", "h100", "cpu"]), st.integers(1, 8)),
        min_size=1,
        max_size=16,
    )
)
def test_every_entry_is_one_node_with_a_unique_name(entries: list[tuple[str, int]]) -> None:
    text = ",".join(f"{m}:{0 if m == 'cpu' else n}" for m, n in entries)
    specs = parse_nodes(text)
    assert len(specs) == len(entries)
    assert len({s.name for s in specs}) == len(specs)
    for spec, (model, count) in zip(specs, entries, strict=True):
        assert spec.name.startswith(model + "-")
        assert spec.gpus == (0 if model == "cpu" else count)


def test_cli_prints_the_address_first_and_stops_everything_it_started() -> None:
    require_namespaces()
    value = check(
        run_isolated("ray_bodies_local:cli_local_cluster", {"nodes": "t4:1,cpu:0"}, 240, [HERE])
    )
    assert isinstance(value, dict)
    assert re.fullmatch(r"127\.0\.0\.1:\d+", value["address"])
    by_name = {n["labels"].get("hetsched.io/node"): n for n in value["nodes"]}
    assert set(by_name) == {"head", "t4-0", "cpu-0"}
    assert by_name["head"]["labels"]["hetsched.io/schedulable"] == "false"
    t4 = by_name["t4-0"]
    assert t4["resources"]["GPU"] == 1 and t4["resources"]["accelerator_type:T4"] == 1
    assert t4["labels"]["hetsched.io/gpu-model"] == "T4"
    assert t4["labels"]["hetsched.io/discovery"] == "fake"
    assert "GPU" not in by_name["cpu-0"]["resources"]
    assert value["rc"] == 0
    # nothing but the namespace's init and the body itself is left, and no work directory
    assert value["left"] == []
    assert value["workdir"] == [True, False]
