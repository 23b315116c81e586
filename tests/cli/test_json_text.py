"""The fast indented JSON text is ``json.dumps(data, indent=2)`` for every value."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.cli.json_text import dumps_indented


class Color(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 2


CASES: list[Any] = [
    {},
    [],
    (),
    "plain",
    'é ✓ \n " \\ \x00 \U0001f600',
    0,
    -(2**80),
    1.5,
    1e300,
    -0.0,
    float("nan"),
    float("inf"),
    float("-inf"),
    True,
    False,
    None,
    {"a": [], "b": {}, "c": [{}], "d": [[], [[]]]},
    {3: "int", 2.5: "float", True: "bool", False: "no", None: "none", "s": "str"},
    {float("nan"): 1, float("inf"): 2},
    {"tuple": (1, (2, 3)), "nested": {"x": {"y": {"z": [1, 2.0, "3", None, False]}}}},
    {"enum": Color.RED, "int_enum": Level.HIGH, "key": {Color.RED: 1}},
    [1, "two", 3.0, [4], {"five": 5}],
]


@pytest.mark.parametrize("data", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_the_same_text_as_json_dumps(data: Any) -> None:
    assert dumps_indented(data) == json.dumps(data, indent=2)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"x": object()}, TypeError),
        ({(1, 2): "tuple key"}, TypeError),
        ({"set": {1}}, TypeError),
    ],
    ids=["object", "tuple-key", "set"],
)
def test_what_json_refuses_raises_as_json_does(data: Any, error: type[Exception]) -> None:
    with pytest.raises(error) as ours:
        dumps_indented(data)
    with pytest.raises(error) as theirs:
        json.dumps(data, indent=2)
    assert str(ours.value) == str(theirs.value)


def test_a_cycle_is_refused_as_json_does() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference detected"):
        dumps_indented({"loop": loop})


def test_deep_nesting_gives_the_same_text() -> None:
    deep: Any = "leaf"
    for _ in range(200):
        deep = {"d": [deep]}
    assert dumps_indented(deep) == json.dumps(deep, indent=2)


_KEYS = st.one_of(st.text(max_size=6), st.integers(-5, 5), st.floats(), st.booleans(), st.none())
_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=12)
)
_DATA = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_KEYS, inner, max_size=4),
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(_DATA)
def test_any_json_value_gives_the_same_text(data: Any) -> None:
    assert dumps_indented(data) == json.dumps(data, indent=2)
