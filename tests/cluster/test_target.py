"""The target workload learned from submissions: window, popularity rule, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import openb_mini_trace
from hetsched.cluster.target import ShapeHistory, shape_of, workload_of
from hetsched.model.job import DeviceRequest, TaskRequest
from hetsched.sim.experiments.openb import load_trace, target_classes

SHARE = TaskRequest(4000, 1024, (DeviceRequest.of("gpu", 1, 500),))
WHOLE = TaskRequest(8000, 2048, (DeviceRequest.of("gpu", 2),))
CPU = TaskRequest(2000, 512)
T4 = TaskRequest(4000, 0, (DeviceRequest.of("gpu", 1, 250, 'device.attributes["model"] == "T4"'),))


@pytest.mark.parametrize(
    ("request_", "shape"),
    [
        (SHARE, (4000, 1, 500, None)),
        (WHOLE, (8000, 2, 1000, None)),
        (CPU, (2000, 0, 0, None)),
        (T4, (4000, 1, 250, 'device.attributes["model"] == "T4"')),
        (TaskRequest(1000, 0, (DeviceRequest.of("fpga", 1),)), (1000, 0, 0, None)),
    ],
    ids=["share", "whole", "cpu-only", "selector", "other-class"],
)
def test_shape_table(request_: TaskRequest, shape: tuple[object, ...]) -> None:
    assert shape_of(request_) == shape


def classes_of(history: ShapeHistory, now: float) -> list[tuple[int, int, int, float]]:
    target = history.target(now)
    assert target is not None
    return [(c.cpu_milli, c.count, c.share, c.weight) for c in target.classes]


def test_window_forgets_old_submissions() -> None:
    history = ShapeHistory(window_s=3600)
    history.observe(SHARE, 0, tasks=5)
    history.observe(WHOLE, 1800)
    history.observe(WHOLE, 3000)
    assert len(history) == 7
    assert classes_of(history, 3000) == [(4000, 1, 500, 5.0), (8000, 2, 1000, 2.0)]
    # at 3600 the window starts at 0: the shares submitted at 0 still count
    assert classes_of(history, 3600) == [(4000, 1, 500, 5.0), (8000, 2, 1000, 2.0)]
    assert classes_of(history, 3601) == [(8000, 2, 1000, 2.0)]
    assert len(history) == 2
    assert history.target(10_000) is None and len(history) == 0


def test_popularity_rule_and_ties() -> None:
    # 20 tasks: CPU x12, SHARE x5, WHOLE x2, T4 x1 -> cumulative 12, 17, 19 (95 %): 3 kept
    history = ShapeHistory(window_s=None)
    for request, tasks in ((T4, 1), (WHOLE, 2), (SHARE, 5), (CPU, 12)):
        history.observe(request, 0, tasks)
    assert classes_of(history, 1e9) == [
        (2000, 0, 0, 12.0),
        (4000, 1, 500, 5.0),
        (8000, 2, 1000, 2.0),
    ]
    # equal counts keep the order first seen
    tied = ShapeHistory(window_s=None, popularity=1.0)
    tied.observe(WHOLE, 0)
    tied.observe(SHARE, 1)
    assert classes_of(tied, 1) == [(8000, 2, 1000, 1.0), (4000, 1, 500, 1.0)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window_s": 0}, "window_s must be positive"),
        ({"window_s": -5.0}, "window_s must be positive"),
        ({"window_s": None, "popularity": 0}, "popularity must be in"),
        ({"window_s": None, "popularity": 1.5}, "popularity must be in"),
    ],
)
def test_bad_settings(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ShapeHistory(**kwargs)  # type: ignore[arg-type]


def test_bad_observations_change_nothing() -> None:
    history = ShapeHistory(window_s=60)
    history.observe(SHARE, 10)
    with pytest.raises(ValueError, match="time went backwards"):
        history.observe(WHOLE, 5)
    with pytest.raises(ValueError, match="tasks must be at least 1"):
        history.observe(WHOLE, 20, tasks=0)
    with pytest.raises(ValueError, match="time went backwards"):
        history.target(9)
    assert classes_of(history, 10) == [(4000, 1, 500, 1.0)]


def test_all_of_a_trace_is_the_openb_target(tmp_path: Path) -> None:
    """Observing every pod of a trace in file order gives the experiment's own M."""
    trace = load_trace(openb_mini_trace(tmp_path), "mini")
    history = ShapeHistory(window_s=None)
    for t, pod in enumerate(trace.pods):
        history.observe(pod.request(), float(t))
    learned = history.target(float(len(trace.pods)))
    assert learned is not None
    expected = [
        (c.cpu_milli, c.count, c.share, c.selector, c.weight) for c in target_classes(trace.pods)
    ]
    got = [(c.cpu_milli, c.count, c.share, c.selector, c.weight) for c in learned.classes]
    assert got == expected


REQUESTS = [SHARE, WHOLE, CPU, T4]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 3), st.integers(1, 3)), max_size=30),
    st.integers(1, 120),
    st.sampled_from([0.5, 0.95, 1.0]),
)
def test_window_matches_a_recount(
    events: list[tuple[int, int, int]], window: int, popularity: float
) -> None:
    """After every event, M equals the rule applied afresh to the events in the window."""
    history = ShapeHistory(window_s=window, popularity=popularity)
    now = 0
    seen: list[tuple[int, int, int]] = []
    for step, which, tasks in events:
        now += step
        history.observe(REQUESTS[which], now, tasks)
        seen.append((now, which, tasks))
        kept = [(t, w, n) for t, w, n in seen if t >= now - window]
        counts: dict[object, int] = {}
        for _, w, n in kept:  # first seen among the kept, as the history keeps them
            shape = shape_of(REQUESTS[w])
            counts[shape] = counts.get(shape, 0) + n
        expected = workload_of(counts.items(), popularity)  # type: ignore[arg-type]
        got = history.target(now)
        assert expected is not None and got is not None
        assert sorted(got.classes, key=str) == sorted(expected.classes, key=str)
        assert len(history) == sum(n for _, _, n in kept)
