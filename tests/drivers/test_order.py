"""The one order of simultaneous events."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from builders import gpu_node, job
from hetsched.drivers import EventOrder, in_order, order_of
from hetsched.model.device import Health
from hetsched.scheduler import (
    DeviceHealthChanged,
    Event,
    JobCancelled,
    JobSubmitted,
    NodeAdded,
    NodeChanged,
    NodeRemoved,
    TaskCheckpointed,
    TaskFinished,
    TaskStopped,
    Tick,
)

EVENTS: list[Event] = [
    Tick(),
    JobSubmitted(job("a")),
    JobCancelled("b"),
    NodeRemoved("n"),
    TaskFinished("c", 0, 1),
    DeviceHealthChanged("n/gpu0", Health.UNHEALTHY),
    TaskStopped("d", 0, 1),
    NodeAdded(gpu_node("m")),
    JobSubmitted(job("e")),
    TaskCheckpointed("c", 0, 1),
    NodeChanged("m", labels={"zone": "b"}),
]


def test_reports_then_cluster_then_cancellations_then_arrivals_then_ticks() -> None:
    ordered = in_order(EVENTS)
    assert [type(e).__name__ for e in ordered] == [
        "TaskFinished",
        "TaskStopped",
        "TaskCheckpointed",
        "NodeRemoved",
        "DeviceHealthChanged",
        "NodeAdded",
        "NodeChanged",
        "JobCancelled",
        "JobSubmitted",
        "JobSubmitted",
        "Tick",
    ]
    # stable within a rank: the driver's own order
    assert [e.job.id for e in ordered if isinstance(e, JobSubmitted)] == ["a", "e"]


@given(st.permutations(EVENTS))
def test_any_arrival_order_sorts_to_ranks_in_order(events: list[Event]) -> None:
    ranks = [order_of(e) for e in in_order(events)]
    assert ranks == sorted(ranks)
    assert ranks[0] is EventOrder.REPORT and ranks[-1] is EventOrder.TICK
