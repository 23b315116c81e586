"""The round engine's anchor metrics: finish-time fairness rho (mean and max), makespan, and
fair-catchup's knob carried from a Gavel point to its policy."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hetsched.cli.main import app
from hetsched.sim.engine.round_mode import RoundConfig, RoundJob, RoundSimulator
from hetsched.sim.experiments.gavel import GavelPoint, point_document
from hetsched.sim.gavel import BUNDLED_THROUGHPUTS, load_throughputs


def test_two_jobs_on_one_device_hand_computed() -> None:
    # two 720 s jobs arrive together on one device: las alternates rounds of 360 s, so a
    # ends at 1,080 s and b at 1,440 s. On an equal 1/2 share each would take 1,440 s:
    # rho(a) = 1080 / 1440 = 0.75, rho(b) = 1; mean 0.875, max 1; makespan 1,440 s = 0.4 h
    jobs = [RoundJob("a", 0.0, (1.0,), 1, 720.0), RoundJob("b", 0.0, (1.0,), 1, 720.0)]
    result = RoundSimulator(["m0"], [1], jobs, RoundConfig("las")).run()
    assert [o.isolated_s for o in result.measured] == pytest.approx([1440.0, 1440.0])
    assert [o.ftf for o in result.measured] == pytest.approx([0.75, 1.0])
    assert result.mean_ftf() == pytest.approx(0.875)
    assert result.worst_ftf() == pytest.approx(1.0)
    assert result.makespan_h() == pytest.approx(0.4)
    # Jain's index over the users' isolated / actual: (4/3 + 1)^2 / (2 (16/9 + 1)) = 0.98
    assert result.jain() == pytest.approx(0.98)


def test_a_later_arrival_is_measured_from_its_own_arrival() -> None:
    # a alone from 0 (n = 1: isolated 720 s); b arrives at 100 s, joins at the 360 s
    # boundary while a runs (n = 2: isolated 2 x 360 = 720 s). Gavel's rule: b has no
    # share until the next solve, 1,920 s after the one at 0 s (as in Gavel, a job that
    # arrived since the last solve waits for the next, even on an idle cluster), so it
    # runs from 1,920 s and ends at 2,280 s: rho (2,280 - 100) / 720.
    jobs = [RoundJob("a", 0.0, (1.0,), 1, 720.0), RoundJob("b", 100.0, (1.0,), 1, 360.0)]
    result = RoundSimulator(["m0"], [1], jobs, RoundConfig("las")).run()
    assert {o.job_id: o.end for o in result.measured} == pytest.approx({"a": 720.0, "b": 2280.0})
    assert [o.ftf for o in result.measured] == pytest.approx([1.0, 2180.0 / 720.0])
    assert result.mean_ftf() == pytest.approx((1.0 + 2180.0 / 720.0) / 2)
    assert result.makespan_h() == pytest.approx(2280.0 / 3600.0)


def test_nothing_finished_gives_no_fairness_and_no_makespan() -> None:
    jobs = [RoundJob("a", 0.0, (1.0,), 1, 7200.0)]
    result = RoundSimulator(["m0"], [1], jobs, RoundConfig("las", until=360.0)).run()
    assert not result.complete
    assert result.mean_ftf() is None and result.makespan_h() is None


@settings(max_examples=20, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2000), st.floats(50.0, 3000.0), st.sampled_from([1.0, 3.0])),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(["las", "fair-catchup"]),
)
def test_mean_rho_lies_between_the_best_and_the_worst_job(
    specs: list[tuple[int, float, float]], policy: str
) -> None:
    jobs = [
        RoundJob(f"j{i}", float(t), (1.0, fast), 1, work)
        for i, (t, work, fast) in enumerate(sorted(specs))
    ]
    result = RoundSimulator(["slow", "fast"], [1, 1], jobs, RoundConfig(policy)).run()
    rhos = [o.ftf for o in result.measured if o.ftf is not None]
    mean, worst = result.mean_ftf(), result.worst_ftf()
    assert mean is not None and worst is not None and result.complete
    assert min(rhos) - 1e-9 <= mean <= worst + 1e-9
    span = result.makespan_h()
    assert span is not None
    assert span * 3600 == pytest.approx(max(o.end or 0 for o in result.measured) - jobs[0].arrival)


def test_the_point_reports_the_anchor_metrics_and_the_knob() -> None:
    table = load_throughputs(BUNDLED_THROUGHPUTS)
    point = GavelPoint("fair-catchup", 4.0, 0, False, (0, 20), catchup_floor=0.5)
    result = point.run(table)
    doc = point_document(point, result, 0.0)
    assert doc["catchup_floor"] == 0.5
    assert doc["mean_ftf"] == pytest.approx(result.mean_ftf(), abs=1e-4)
    assert doc["makespan_h"] == pytest.approx(result.makespan_h(), abs=1e-4)
    las = point_document(GavelPoint("las", 4.0, 0, False, (0, 20)), result, 0.0)
    assert las["catchup_floor"] is None  # las has no such knob


def test_round_config_refuses_a_floor_outside_0_1() -> None:
    with pytest.raises(ValueError, match=r"catchup_floor: must be in 0\.\.1, got 2"):
        RoundConfig("fair-catchup", catchup_floor=2.0)


def test_cli_catchup_floor() -> None:
    args = ["sim", "gavel", "--policy", "fair-catchup", "--rate", "2", "--window", "0:10"]
    done = CliRunner().invoke(app, [*args, "--catchup-floor", "0.25", "-o", "json"])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output)
    assert doc["catchup_floor"] == 0.25 and doc["complete"]
    bad = CliRunner().invoke(app, [*args, "--catchup-floor", "1.5"])
    assert bad.exit_code == 2
    assert "--catchup-floor: expected 0..1, got 1.5" in bad.output
