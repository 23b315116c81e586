"""Fair shares in reference-device units (the profile's ``fairness`` switch).

Literal cases: two users, one on a fast model, one on a slow one, under DRF, fair share and
a quota, in device units and in V100 units. Properties: with the switch off, the speed
maps and the reference model change no decision; with it on but no job giving speeds,
every decision is the one of device units; the ledger gives back exactly what it charged.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import gpu_node, job
from harness import Harness
from hetsched.cluster import ClusterState
from hetsched.framework.profile import ProfileError, parse_profile
from hetsched.model.job import Job
from hetsched.model.speed import JobSpeed, SpeedTable
from hetsched.queueing.drf import Drf
from hetsched.queueing.fairshare import Fairshare
from hetsched.scheduler import Bind, JobSubmitted, Scheduler

A100 = 'device.attributes["model"] == "A100"'
V100 = 'device.attributes["model"] == "V100"'
FAST = JobSpeed({"A100": 3.0, "V100": 1.0})
NORMALIZED = {"units": "normalized", "reference_model": "V100"}


def _cluster() -> ClusterState:
    return ClusterState([gpu_node("a", gpus=2, model="A100"), gpu_node("v", gpus=2, model="V100")])


def _two_users(profile: dict[str, Any]) -> Scheduler:
    core = Scheduler(_cluster(), parse_profile(profile))
    core.handle(
        [
            JobSubmitted(job("alice-1", gpus=1, selector=A100, user="alice", speed=FAST)),
            JobSubmitted(job("bob-1", gpus=1, selector=V100, user="bob", speed=FAST)),
        ],
        0.0,
    )
    return core


@pytest.mark.parametrize(
    ("fairness", "alice", "bob"),
    [
        # devices: one GPU each; the per-model flavor (1 of 2 of its model) dominates
        ({}, 0.5, 0.5),
        ({"units": "devices", "reference_model": "V100"}, 0.5, 0.5),
        # V100 units: alice's A100 counts 3 of the 4 GPUs' worth; bob's V100 one
        (NORMALIZED, 0.75, 0.5),
        # A100 units: alice's A100 is one unit; bob's V100 a third of one
        ({"units": "normalized", "reference_model": "a100"}, 0.5, 0.5),
    ],
)
def test_drf_shares_literal(fairness: dict[str, str], alice: float, bob: float) -> None:
    core = _two_users({"queue_sort": "drf", "fairness": fairness})
    policy = core.framework.queue_sort
    assert isinstance(policy, Drf)
    assert policy.share("alice") == pytest.approx(alice)
    assert policy.share("bob") == pytest.approx(bob)


def test_ledger_counts_reference_units() -> None:
    devices = _two_users({"queue_sort": "drf"}).ledger.by_user
    normal = _two_users({"queue_sort": "drf", "fairness": NORMALIZED}).ledger.by_user
    assert devices["alice"]["gpu"] == 1000 and devices["bob"]["gpu"] == 1000
    assert normal["alice"]["gpu"] == 3000 and normal["bob"]["gpu"] == 1000
    # the per-model flavors keep counting devices
    assert normal["alice"]["gpu/A100"] == 1000 and normal["bob"]["gpu/V100"] == 1000
    reference_a100 = _two_users(
        {"queue_sort": "drf", "fairness": {"units": "normalized", "reference_model": "A100"}}
    ).ledger.by_user
    assert reference_a100["alice"]["gpu"] == 1000 and reference_a100["bob"]["gpu"] == 333


def test_drf_next_gpu_goes_to_the_slow_user_in_normalized_units() -> None:
    """alice holds an A100, bob a V100, carol the other A100; alice and bob then both ask
    for the one free V100, alice first. In devices their shares tie (0.5) and arrival
    decides; in V100 units alice holds three times bob's worth, so bob gets it."""

    def second(fairness: dict[str, str]) -> str:
        core = _two_users({"queue_sort": "drf", "fairness": fairness})
        core.handle([JobSubmitted(job("carol-1", gpus=1, selector=A100, user="carol"))], 0.5)
        actions = core.handle(
            [
                JobSubmitted(job("alice-2", gpus=1, selector=V100, user="alice", speed=FAST)),
                JobSubmitted(job("bob-2", gpus=1, selector=V100, user="bob", speed=FAST)),
            ],
            1.0,
        )
        bound = [a.job_id for a in actions if isinstance(a, Bind)]
        assert len(bound) == 1
        return bound[0]

    assert second({}) == "alice-2"
    assert second(NORMALIZED) == "bob-2"


def test_fairshare_usage_counts_reference_hours() -> None:
    for fairness, ratio in (({}, 1.0), (NORMALIZED, 1.5)):
        core = _two_users({"queue_sort": "fairshare", "fairness": fairness})
        core.handle([], 3600.0)
        policy = core.framework.queue_sort
        assert isinstance(policy, Fairshare)
        assert policy.usage("alice") / policy.usage("bob") == pytest.approx(ratio, rel=1e-6)


def _quota_profile(fairness: dict[str, str]) -> dict[str, Any]:
    return {
        "flavors": ["gpu"],
        "queues": [{"name": "q", "nominal": {"gpu": 2}, "borrowing_limit": {"gpu": 0}}],
        "fairness": fairness,
    }


@pytest.mark.parametrize(("fairness", "starts"), [({}, True), (NORMALIZED, False)])
def test_quota_counts_reference_units(fairness: dict[str, str], starts: bool) -> None:
    """A quota of 2 GPUs holds two V100s; in V100 units, not an A100 worth three."""
    core = Scheduler(_cluster(), parse_profile(_quota_profile(fairness)))
    actions = core.handle(
        [JobSubmitted(job("fast", gpus=1, selector=A100, queue="q", speed=FAST))], 0.0
    )
    assert any(isinstance(a, Bind) for a in actions) is starts
    if not starts:
        assert "quota" in str(core.record("fast").explanation)
    slow = core.handle(
        [JobSubmitted(job("slow", gpus=2, selector=V100, queue="q", speed=FAST))], 1.0
    )
    assert any(isinstance(a, Bind) and a.job_id == "slow" for a in slow) is not starts


def test_job_type_rates_come_from_the_table() -> None:
    table = SpeedTable.of({"resnet": {"A100": 4.0, "V100": 1.0}})
    core = Scheduler(_cluster(), parse_profile({"queue_sort": "drf", "fairness": NORMALIZED}))
    core.speed_table = table
    core.handle(
        [JobSubmitted(job("r", gpus=1, selector=A100, speed=JobSpeed(job_type="resnet")))], 0.0
    )
    assert core.ledger.by_job["r"]["gpu"] == 4000


@pytest.mark.parametrize(
    ("fairness", "message"),
    [
        ({"units": "normalized"}, "fairness: reference_model: required with units: normalized"),
        ({"units": "hours"}, "fairness.units: Input should be 'devices' or 'normalized'"),
        ({"units": "normalized", "reference_model": " "}, "fairness: reference_model: must"),
        ({"unit": "normalized"}, "fairness.unit: Extra inputs are not permitted"),
    ],
)
def test_bad_fairness_sections(fairness: dict[str, str], message: str) -> None:
    with pytest.raises(ProfileError, match=message.replace("(", r"\(")):
        parse_profile({"fairness": fairness})


# -- properties ------------------------------------------------------------------------

_MODELS = ("A100", "V100", "T4")


@st.composite
def _workloads(draw: st.DrawFn, speeds: bool) -> list[Job]:
    out = []
    for i in range(draw(st.integers(1, 14))):
        rates = (
            draw(st.dictionaries(st.sampled_from(_MODELS), st.sampled_from([0.5, 1.0, 2.0, 3.5])))
            if speeds
            else {}
        )
        out.append(
            job(
                f"j{i:02d}",
                cpu=draw(st.sampled_from([1000, 4000])),
                gpus=draw(st.integers(0, 3)),
                user=draw(st.sampled_from(["u1", "u2", "u3"])),
                queue=draw(st.sampled_from(["qa", "qb"])),
                submit_time=float(draw(st.integers(0, 30))),
                estimated_runtime_s=float(draw(st.integers(1, 40))),
                speed=JobSpeed(rates),
            )
        )
    return out


def _profile(sort: str, fairness: dict[str, str]) -> dict[str, Any]:
    return {
        "queue_sort": sort,
        "flavors": ["gpu", "gpu/A100"],
        "queues": [
            {"name": "qa", "nominal": {"gpu": 3, "gpu/A100": 1}},
            {"name": "qb", "nominal": {"gpu": 2}, "borrowing_limit": {"gpu": 2}},
        ],
        "fairness": fairness,
    }


def _decisions(sort: str, fairness: dict[str, str], jobs: list[Job]) -> list[tuple[float, str]]:
    nodes = [gpu_node(f"n{m}", gpus=2, model=m, cpu=8000) for m in _MODELS]
    core = Scheduler(ClusterState(nodes), parse_profile(_profile(sort, fairness)))
    harness = Harness(core, check_explanations=False)
    harness.submit(jobs)
    harness.run(400.0)
    assert not core.ledger.by_key, "every charge was refunded"
    assert not core.ledger.by_user and not core.ledger.by_queue
    return [(t, repr(a)) for t, a in harness.log]


_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(st.sampled_from(["drf", "fairshare"]), _workloads(speeds=True))
def test_off_ignores_speeds_and_the_reference(sort: str, jobs: list[Job]) -> None:
    off = _decisions(sort, {}, jobs)
    assert _decisions(sort, {"units": "devices", "reference_model": "A100"}, jobs) == off
    # the same jobs without speed maps: device units never read them
    plain = [dataclasses.replace(j, speed=JobSpeed()) for j in jobs]
    assert _decisions(sort, {}, plain) == off


@_SETTINGS
@given(st.sampled_from(["drf", "fairshare"]), _workloads(speeds=False))
def test_normalized_without_speeds_decides_as_devices(sort: str, jobs: list[Job]) -> None:
    assert _decisions(sort, NORMALIZED, jobs) == _decisions(sort, {}, jobs)


@_SETTINGS
@given(st.sampled_from(["drf", "fairshare"]), _workloads(speeds=True))
def test_normalized_ledger_balances(sort: str, jobs: list[Job]) -> None:
    _decisions(sort, NORMALIZED, jobs)  # asserts every charge is refunded exactly
