"""The engine's one event loop: what falls due when, and in which order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hetsched.sim.engine.loop import EventLoop


def test_entries_fall_due_by_time_then_order_then_push() -> None:
    loop: EventLoop[str] = EventLoop()
    for time, order, name in [(5.0, 1, "c"), (1.0, 2, "b"), (1.0, 0, "a"), (1.0, 2, "b2")]:
        loop.push(time, order, name)
    assert loop.next_time() == 1.0
    assert loop.pop_due(1.0) == [(0, "a"), (2, "b"), (2, "b2")]
    assert loop.pop_due(1.0) == []
    assert loop.pop_due(5.0) == [(1, "c")]
    assert loop.next_time() is None


def test_a_keyed_entry_takes_its_key_as_tie_break() -> None:
    loop: EventLoop[str] = EventLoop()
    loop.seq = 10  # keys below the sequence in use come first
    loop.push(0.0, 3, "pushed")
    loop.push_keyed(0.0, 3, 4, "keyed")
    assert [p for _, p in loop.pop_due(0.0)] == ["keyed", "pushed"]


def test_run_stops_past_until_or_when_the_step_says() -> None:
    loop: EventLoop[None] = EventLoop()
    seen: list[float] = []

    def step(now: float) -> bool:
        loop.pop_due(now)
        seen.append(now)
        loop.push(now + 10.0, 0, None)
        return now < 25.0

    loop.push(0.0, 0, None)
    loop.run(step, until=100.0)
    assert seen == [0.0, 10.0, 20.0, 30.0]
    assert loop.now == 30.0

    seen.clear()
    loop.run(step, until=45.0)
    assert seen == [40.0]  # the next time, 50, is past until


@given(st.lists(st.tuples(st.floats(0, 1e6, allow_nan=False), st.integers(0, 5)), max_size=40))
def test_the_clock_never_goes_backwards(entries: list[tuple[float, int]]) -> None:
    loop: EventLoop[int] = EventLoop()
    for i, (time, order) in enumerate(entries):
        loop.push(time, order, i)
    times: list[float] = []
    delivered: list[tuple[float, int, int]] = []

    def step(now: float) -> bool:
        times.append(now)
        delivered.extend((now, order, i) for order, i in loop.pop_due(now))
        return True

    loop.run(step)
    assert times == sorted(set(times))
    assert delivered == sorted(delivered, key=lambda d: (d[0], d[1], d[2]))
    assert sorted(i for _, _, i in delivered) == list(range(len(entries)))
