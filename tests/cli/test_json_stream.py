"""Streamed indented JSON is ``json.dumps(data, indent=2)`` of the data with its iterators
read as lists, and reads each iterator only as it writes it."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.cli.json_stream import write_json


def _as_lists(value: Any) -> Any:
    """``value`` as json.dumps would see it with every iterator read as a list."""
    if isinstance(value, Iterator):
        return [_as_lists(v) for v in value]
    if type(value) is dict:
        return {k: _as_lists(v) for k, v in value.items()}
    if type(value) is list:
        return [_as_lists(v) for v in value]
    return value


def _streamed(value: Any) -> str:
    out = io.StringIO()
    write_json(value, out.write)
    return out.getvalue()


#: each case made afresh for each reading (an iterator is read once)
CASES: list[Callable[[], Any]] = [
    lambda: iter([]),
    lambda: iter([1, "two", None]),
    lambda: {"jobs": iter([])},
    lambda: {"a": 1, "jobs": iter([{"id": "x", "t": 1.5}]), "z": {}},
    lambda: {"replays": [{"jobs": iter([{"x": [1, {}]}, {}]), "s": {"u": [0.5]}}, {"jobs": []}]},
    lambda: [iter([iter([]), iter([[], {}]), 'é\n"\\'])],
    lambda: {"nan": float("nan"), "rows": iter([float("inf"), -0.0])},
    lambda: {"plain": {"no": ["iterator"]}, "here": [1, 2]},
]


@pytest.mark.parametrize("make", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_the_text_of_json_dumps_with_iterators_as_lists(make: Callable[[], Any]) -> None:
    assert _streamed(make()) == json.dumps(_as_lists(make()), indent=2)


def test_each_row_is_written_before_the_next_is_built() -> None:
    written: list[str] = []
    seen_before_row: list[int] = []

    def rows() -> Iterator[dict[str, int]]:
        for i in range(3):
            seen_before_row.append(sum(chunk.count('"row"') for chunk in written))
            yield {"row": i}

    write_json({"jobs": rows()}, written.append)
    assert seen_before_row == [0, 1, 2]
    assert json.loads("".join(written)) == {"jobs": [{"row": 0}, {"row": 1}, {"row": 2}]}


def test_a_key_that_is_not_a_string_is_refused_before_anything_is_written() -> None:
    written: list[str] = []
    with pytest.raises(TypeError, match="keys are strings"):
        write_json({"a": iter([1]), 2: "b"}, written.append)
    assert written == []


_leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)


def _tree(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=6), children, max_size=4)
        | st.tuples(st.just("iter"), st.lists(children, max_size=4))
    )


def _build(spec: Any) -> tuple[Any, Any]:
    """(the value with iterators, the same value with lists) from a drawn spec."""
    if isinstance(spec, tuple):
        pairs = [_build(item) for item in spec[1]]
        return iter([p[0] for p in pairs]), [p[1] for p in pairs]
    if isinstance(spec, list):
        pairs = [_build(item) for item in spec]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    if isinstance(spec, dict):
        built = {k: _build(v) for k, v in spec.items()}
        return {k: v[0] for k, v in built.items()}, {k: v[1] for k, v in built.items()}
    return spec, spec


@settings(max_examples=300, deadline=None)
@given(st.recursive(_leaves, _tree, max_leaves=30))
def test_any_document_streams_as_json_dumps_writes_it(spec: Any) -> None:
    value, lists = _build(spec)
    assert _streamed(value) == json.dumps(lists, indent=2)
