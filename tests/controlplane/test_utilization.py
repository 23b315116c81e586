"""The measured busy share per device (controlplane/utilization.py): the guard's estimate from
the tasks' CPU use, and a part that reads the device itself winning over it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.controlplane.utilization import Reading, activity, device_utilization
from hetsched.model.device import Device

DEVICES = {f"n/gpu{i}": Device(f"n/gpu{i}", "gpu", "nvidia", "A100") for i in range(3)}


@dataclass
class Usage:
    cpu_milli: float


@dataclass
class FakeGuard:
    usage: dict[str, Usage]
    counts: dict[str, int]
    kills: int = 0


@dataclass
class FakeReader:
    values: dict[str, float]

    def utilization(self) -> dict[str, float]:
        return self.values


def placement(cpu_milli: int, *shares: tuple[str, int]) -> Placement:
    return Placement("n", cpu_milli, 1024, tuple(DeviceShare(d, s) for d, s in shares))


@pytest.mark.parametrize(
    ("used", "requested", "expected"),
    [
        (0, 4000, 0.0),
        (500, 4000, 0.5),  # one core is enough to feed a device
        (1000, 4000, 1.0),
        (250, 500, 0.5),  # a task that asked for half a core: half a core is all of it
        (900, 0, 0.9),  # no request: against one core
        (3000, 2000, 1.0),
        (-5, 1000, 0.0),
    ],
)
def test_activity(used: float, requested: int, expected: float) -> None:
    assert activity(used, requested) == pytest.approx(expected)


def test_shares_and_activity_add_up_per_device() -> None:
    guard = FakeGuard({"a/0#1": Usage(1000), "b/0#1": Usage(250), "gone/0#1": Usage(800)}, {})
    running = {
        ("a", 0): placement(2000, ("n/gpu0", 500)),
        ("b", 0): placement(1000, ("n/gpu0", 500), ("n/gpu1", 1000)),
    }
    readings = device_utilization([guard], DEVICES, running)
    assert readings == {
        "n/gpu0": Reading(pytest.approx(0.5 + 0.125), "guard"),  # type: ignore[arg-type]
        "n/gpu1": Reading(0.25, "guard"),
        "n/gpu2": Reading(0.0, "guard"),  # held by nothing: idle
    }


def test_without_a_guard_only_what_was_read() -> None:
    reader = FakeReader({"n/gpu1": 0.7, "elsewhere/gpu0": 0.3, "n/gpu2": 1.7})
    assert device_utilization([reader], DEVICES, {}) == {
        "n/gpu1": Reading(0.7, "device"),
        "n/gpu2": Reading(1.0, "device"),
    }
    assert device_utilization([], DEVICES, {}) == {}


@given(
    read=st.dictionaries(st.sampled_from(sorted(DEVICES)), st.floats(-1, 2)),
    tasks=st.lists(
        st.tuples(
            st.floats(0, 8000),
            st.integers(0, 8000),
            st.lists(st.tuples(st.sampled_from(sorted(DEVICES)), st.integers(1, 1000)), max_size=3),
        ),
        max_size=6,
    ),
)
def test_readings_are_shares_and_reading_the_device_wins(
    read: dict[str, float], tasks: list[tuple[float, int, list[tuple[str, int]]]]
) -> None:
    guard = FakeGuard({f"j{i}/0#1": Usage(used) for i, (used, _, _) in enumerate(tasks)}, {})
    running = {(f"j{i}", 0): placement(cpu, *held) for i, (_, cpu, held) in enumerate(tasks)}
    readings = device_utilization([FakeReader(read), guard], DEVICES, running)
    assert set(readings) == set(DEVICES)
    for device_id, reading in readings.items():
        assert 0.0 <= reading.value <= 1.0
        assert reading.source == ("device" if device_id in read else "guard")
        if device_id in read:
            assert reading.value == min(1.0, max(0.0, read[device_id]))
