"""TaskKey: one string form, one parser."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetsched.keys import TaskKey


@pytest.mark.parametrize(
    ("key", "text"),
    [
        (TaskKey("j1", 0, 1), "j1/0#1"),
        (TaskKey("ns/pod#abc@node", 3, 12), "ns/pod#abc@node/3#12"),
        (TaskKey("grp#g0", 0, 0), "grp#g0/0#0"),
    ],
)
def test_string_form_and_back(key: TaskKey, text: str) -> None:
    assert str(key) == text
    assert TaskKey.parse(text) == key
    assert (key.job, key.task, key.run) == tuple(key)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("j1", "found no job"),
        ("/0#1", "found no job"),
        ("j1/0", "found no '#'"),
        ("j1/x#1", "task must be a whole number, got 'x'"),
        ("j1/0#", "run must be a whole number, got ''"),
        ("j1/0#-1", "run must be a whole number"),
        ("j1/0#1.5", "run must be a whole number"),
        ("j1/٣#1", "task must be a whole number"),
    ],
)
def test_bad_strings_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match="task key") as err:
        TaskKey.parse(text)
    assert says in str(err.value)


@given(
    job=st.text(min_size=1).filter(lambda s: s.strip() == s and s),
    task=st.integers(0, 10**6),
    run=st.integers(0, 10**6),
)
def test_any_key_round_trips(job: str, task: int, run: int) -> None:
    key = TaskKey(job, task, run)
    assert TaskKey.parse(str(key)) == key
