"""The DRA health stream as the kubelet keeps it (official protos): a device the kubelet
has not heard of within its ``health_check_timeout_seconds`` (30 s by default) is Unknown,
counted from the ``last_updated_time`` the driver sent. The driver's clock is the test's
(minutes pass in steps, never in real time); the driver's thread is given real time to
react after each step."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from hetsched.k8s.dra.service import HealthTiming
from k8s.dprig import write_devices
from k8s.drakubelet import DeviceHealth
from k8s.test_dra_driver import DEVICES, DRIVER, Rig, running_rig

START = 1_800_000_000.0
TIMING = HealthTiming(interval_s=10.0, timeout_s=30, poll_s=0.005)


@dataclass
class Clock:
    now: float = START

    def __call__(self) -> float:
        return self.now


def _latest(rig: Rig) -> list[DeviceHealth]:
    plugin = rig.kubelet.plugins[DRIVER]
    return plugin.health[-1] if plugin.health else []


def _heard_since(rig: Rig, when: float) -> bool:
    latest = _latest(rig)
    return bool(latest) and all(d.since >= when for d in latest)


@pytest.mark.parametrize("step_s", [1.0, 5.0, 9.0])
def test_devices_stay_healthy_over_two_minutes_of_silence(short_dir: Path, step_s: float) -> None:
    clock = Clock()
    with running_rig(short_dir, DEVICES, TIMING, clock) as rig:
        rig.kubelet.wait_for(lambda: _heard_since(rig, START), "the first list")
        while clock.now < START + 120:
            clock.now += step_s
            # the driver keeps the kubelet within one interval of now (a real wait for its
            # thread, not a clock one); then the kubelet's view at now is Healthy
            rig.kubelet.wait_for(
                lambda: _heard_since(rig, clock.now - TIMING.interval_s),
                f"a list at +{clock.now - START:.0f} s",
            )
            latest = _latest(rig)
            assert {d.device: d.seen_at(clock.now) for d in latest} == {
                "fpga0": "HEALTHY",
                "gpu0": "HEALTHY",
                "gpu1": "HEALTHY",
            }
            assert {d.timeout for d in latest} == {TIMING.timeout_s}
        # a list at most every interval, not one per poll
        lists = len(rig.kubelet.plugins[DRIVER].health)
        assert lists <= 120 / min(step_s, TIMING.interval_s) + 3


def test_a_change_is_sent_at_once_not_at_the_next_interval(short_dir: Path) -> None:
    clock = Clock()
    with running_rig(short_dir, DEVICES, TIMING, clock) as rig:
        rig.kubelet.wait_for(lambda: _heard_since(rig, START), "the first list")
        clock.now += 125.0
        rig.kubelet.wait_for(lambda: _heard_since(rig, clock.now - 10), "a recent list")
        changed_at = clock.now
        write_devices(
            rig.devices, DEVICES.replace("U250, count: 1}", "U250, count: 1, health: unhealthy}")
        )
        # the clock stands still: the list arrives within 0 s of the change (clock time)
        latest = rig.kubelet.wait_health(
            DRIVER, lambda devs: {d.device: d.health for d in devs}["fpga0"] == "UNHEALTHY", "sick"
        )
        fpga = next(d for d in latest if d.device == "fpga0")
        assert fpga.since == int(changed_at)
        assert fpga.seen_at(changed_at + 1) == "UNHEALTHY"
        assert [d.seen_at(changed_at + 1) for d in latest if d.device != "fpga0"] == [
            "HEALTHY",
            "HEALTHY",
        ]


@pytest.mark.parametrize(("interval", "timeout"), [(30.0, 30), (0.0, 30), (40.0, 30)])
def test_an_interval_the_timeout_does_not_cover_is_refused(interval: float, timeout: int) -> None:
    with pytest.raises(ValueError, match="below the timeout"):
        HealthTiming(interval, timeout)


@pytest.mark.parametrize(
    ("fields", "ok"),
    [
        ({}, True),
        ({"health_interval_s": 5, "health_timeout_s": 20}, True),
        ({"health_interval_s": 30, "health_timeout_s": 30}, False),
        ({"health_interval_s": 60}, False),
        ({"health_timeout_s": 0}, False),
    ],
)
def test_the_drivers_config_keeps_the_interval_below_the_timeout(
    fields: dict[str, float], ok: bool
) -> None:
    from pydantic import ValidationError

    from hetsched.k8s.dra.config import DriverConfig

    if ok:
        timing = DriverConfig.model_validate(fields).settings().health
        assert timing.interval_s < timing.timeout_s
    else:
        with pytest.raises(ValidationError):
            DriverConfig.model_validate(fields)
