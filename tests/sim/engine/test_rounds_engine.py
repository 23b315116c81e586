"""The round engine: Gavel's rounds over the round policies (hetsched.sim.engine)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from builders import TRACES
from hetsched.cli.main import app
from hetsched.rounds import policy_names
from hetsched.sim.engine.round_mode import RoundConfig, RoundJob, RoundResult, RoundSimulator
from hetsched.sim.experiments.gavel import GavelPoint, parse_cluster, parse_window
from hetsched.sim.gavel import BUNDLED_THROUGHPUTS, load_throughputs


def _run(jobs: list[RoundJob], capacity: list[int], policy: str = "las", **kw: Any) -> RoundResult:
    models = [f"m{j}" for j in range(len(capacity))]
    config = RoundConfig(policy, **kw)
    return RoundSimulator(models, capacity, jobs, config).run()


# (jobs, capacity, policy, expected end time of each job)
CASES = [
    # one job alone: work / rate, inside its third round
    ([RoundJob("a", 0.0, (2.0,), 1, 2000.0)], [1], "las", {"a": 1000.0}),
    # the fast model is used when it is free
    ([RoundJob("a", 0.0, (1.0, 4.0), 1, 4000.0)], [1, 1], "las", {"a": 1000.0}),
    # an arrival waits for the next round boundary, and (Gavel's rule) for the next solve,
    # 1,920 s after the first: FIFO runs only jobs with a share
    (
        [RoundJob("a", 0.0, (1.0,), 1, 720.0), RoundJob("b", 10.0, (1.0,), 1, 100.0)],
        [1],
        "fifo",
        {"a": 720.0, "b": 2020.0},
    ),
    # two jobs, one device: LAS alternates rounds, both get half
    (
        [RoundJob("a", 0.0, (1.0,), 1, 720.0), RoundJob("b", 0.0, (1.0,), 1, 720.0)],
        [1],
        "las",
        {"a": 1080.0, "b": 1440.0},
    ),
    # a 2-device job cannot run on a model with one device
    ([RoundJob("a", 0.0, (5.0, 1.0), 2, 720.0)], [1, 2], "las", {"a": 720.0}),
]


@pytest.mark.parametrize(("jobs", "capacity", "policy", "ends"), CASES)
def test_literal_cases(
    jobs: list[RoundJob], capacity: list[int], policy: str, ends: dict[str, float]
) -> None:
    result = _run(jobs, capacity, policy)
    assert {o.job_id: o.end for o in result.jobs} == pytest.approx(ends)
    assert result.complete


def test_solving_on_change_starts_an_arrival_at_the_next_boundary() -> None:
    jobs = [RoundJob("a", 0.0, (1.0,), 1, 720.0), RoundJob("b", 10.0, (1.0,), 1, 100.0)]
    result = _run(jobs, [1], "fifo", solve_on_change=True)
    assert {o.job_id: o.end for o in result.jobs} == pytest.approx({"a": 720.0, "b": 820.0})


def test_an_arrival_waits_for_the_next_solve_even_with_devices_free() -> None:
    # a runs alone from 0 (the first solve). b arrives at 100 s, joins at the boundary at
    # 360 s, and has no share until Gavel's rule lets the next solve happen: the first
    # boundary 1,920 s or more after the last (2,160 s). Gavel assigns workers only to the
    # jobs of its allocation, so b does not run on the free device before that; it then
    # does its one round of work: 2,160 + 360 = 2,520 s. Solved on change, it runs at 360 s.
    jobs = [RoundJob("a", 0.0, (1.0,), 1, 3600.0), RoundJob("b", 100.0, (1.0,), 1, 360.0)]
    result = _run(jobs, [2], "las")
    assert {o.job_id: o.end for o in result.jobs} == pytest.approx({"a": 3600.0, "b": 2520.0})
    # busy device time: a's 3,600 s and b's 360 s of 2 x 3,600 s
    assert result.utilization() == pytest.approx((3600.0 + 360.0) / 7200.0)
    on_change = _run(jobs, [2], "las", solve_on_change=True)
    assert {o.job_id: o.end for o in on_change.jobs} == pytest.approx({"a": 3600.0, "b": 720.0})


def test_an_unsolved_job_holds_the_devices_the_mechanism_gives_it() -> None:
    # one model of 2 devices. a (1 device) runs alone from 0; b (2 devices) arrives at
    # 100 s and c (1 device) at 200 s, both joining at the boundary at 360 s with no share.
    # The mechanism takes them in arrival order among the jobs without a share: b does not
    # fit next to a, c does and holds the free device, so nothing but a runs until the
    # solve at 2,160 s. Then LAS (device-time fairness) runs b and a, c in turn.
    jobs = [
        RoundJob("a", 0.0, (1.0,), 1, 3600.0),
        RoundJob("b", 100.0, (1.0,), 2, 360.0),
        RoundJob("c", 200.0, (1.0,), 1, 360.0),
    ]
    result = _run(jobs, [2], "las")
    ends = {o.job_id: o.end for o in result.jobs}
    assert min(ends["b"], ends["c"]) > 2160.0  # neither ran before the solve
    # before it, one device of two was busy (a's): 6 rounds of 360 s
    assert result.utilization() < 1.0


def test_an_idle_cluster_waits_for_the_solve_even_when_its_time_rounds_down() -> None:
    # a is solved at its arrival and ends at 302 s; b arrives on an idle cluster 1,517 s
    # later, before the next solve is due, and nothing else can run: the clock goes to
    # the solve (202.0022... + 1,920 s, which minus 202.0022... is a hair under 1,920 in
    # floating point) and b runs then, 720 s of work: about 2,842.0023 s
    jobs = [
        RoundJob("a", 202.0022677138533, (1.0,), 1, 100.0),
        RoundJob("b", 1719.2490739540988, (1.0,), 1, 720.0),
    ]
    result = _run(jobs, [3], "las")
    assert result.complete
    ends = {o.job_id: o.end for o in result.jobs}
    assert ends == pytest.approx({"a": 302.0022677138533, "b": 2842.0022677138533})


def test_agnostic_las_loses_to_las_on_heterogeneous_devices() -> None:
    # two job types, each 4x faster on "its" model: LAS puts each where it runs best
    jobs = [
        RoundJob(f"j{i}", 0.0, (4.0, 1.0) if i % 2 else (1.0, 4.0), 1, 4.0 * 3600) for i in range(8)
    ]
    # with Gavel's interior-point solutions: to the agnostic twin every split of a job's
    # time over the two models is equally good, so it gets the spread one (a vertex could
    # land on the right models by chance)
    aware = _run(jobs, [4, 4], "las", central=True)
    agnostic = _run(jobs, [4, 4], "agnostic-las", central=True)
    assert aware.mean_jct_h() == pytest.approx(1.0)
    slow = agnostic.mean_jct_h()
    assert slow is not None and slow > 1.2 * 1.0


def test_window_measures_only_its_jobs_and_stops_when_they_finish() -> None:
    jobs = [RoundJob(f"j{i}", 100.0 * i, (1.0,), 1, 150.0) for i in range(50)]
    result = _run(jobs, [2], "las", window=(5, 10))
    assert [o.job_id for o in result.measured] == [f"j{i}" for i in range(5, 10)]
    assert result.complete
    assert len(result.jobs) < 50  # later jobs were never drawn


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValueError, match="policy: unknown 'nope'"):
        RoundConfig("nope")
    with pytest.raises(ValueError, match="round_s"):
        RoundConfig(round_s=0)
    with pytest.raises(ValueError, match="window"):
        RoundConfig(window=(5, 5))
    with pytest.raises(ValueError, match="job a: 1 rates for 2"):
        _run([RoundJob("a", 0.0, (1.0,), 1, 1.0)], [1, 1])
    with pytest.raises(ValueError, match="window: expected START:END"):
        parse_window("4000-5000")
    with pytest.raises(ValueError, match="cluster: expected three counts"):
        parse_cluster("36:36")


_job = st.builds(
    lambda i, t, r, s, w: RoundJob(f"j{i}", t, r, s, w),
    st.integers(0, 10**6),
    st.floats(0, 20_000),
    st.tuples(st.sampled_from([0.0, 0.5, 1.0, 3.0]), st.sampled_from([0.5, 1.0, 2.0])),
    st.sampled_from([1, 2]),
    st.floats(1.0, 20_000),
)


@settings(max_examples=40, deadline=None)
@given(
    jobs=st.lists(_job, min_size=1, max_size=12, unique_by=lambda j: j.id),
    policy=st.sampled_from(policy_names()),
    capacity=st.tuples(st.integers(0, 3), st.integers(2, 3)),
)
def test_every_job_finishes_no_faster_than_alone_and_devices_are_not_overused(
    jobs: list[RoundJob], policy: str, capacity: tuple[int, int]
) -> None:
    jobs = sorted(jobs, key=lambda j: j.arrival)
    result = _run(jobs, list(capacity), policy)
    assert result.complete
    assert len(result.jobs) == len(jobs)
    for job, outcome in zip(jobs, result.jobs, strict=True):
        fits = [r for r, c in zip(job.rates, capacity, strict=True) if c >= job.scale]
        alone = job.work / max(fits)
        assert outcome.jct_s is not None and outcome.jct_s >= alone * (1 - 1e-9)
    length = result.span[1] - result.span[0]
    for busy, count in zip(result.busy, result.capacity, strict=True):
        assert busy <= count * length * (1 + 1e-9) + 1e-6
    again = _run(jobs, list(capacity), policy)
    assert [o.end for o in again.jobs] == [o.end for o in result.jobs]


def test_gavel_point_runs_gavels_stream() -> None:
    table = load_throughputs(BUNDLED_THROUGHPUTS)
    point = GavelPoint("las", 4.0, 0, False, (0, 40))
    result = point.run(table)
    assert result.complete and len(result.measured) == 40
    # isolated on a 1/n share is never faster than alone on a V100
    assert all(o.isolated_s > 0 for o in result.measured)
    jct = result.mean_jct_h()
    assert jct is not None and jct > 0
    assert 0 < result.utilization() <= 1
    jain = result.jain()
    assert jain is not None and 0 < jain <= 1


def test_cli_sim_gavel_json() -> None:
    args = ["sim", "gavel", "--policy", "agnostic-las", "--rate", "2", "--window", "0:20"]
    result = CliRunner().invoke(app, [*args, "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["policy"] == "agnostic-las" and doc["rate"] == 2.0 and doc["seed"] == 0
    assert doc["complete"] and doc["measured"] == doc["finished"] == 20
    for key in ("mean_jct_h", "utilization", "jain", "worst_ftf"):
        assert isinstance(doc[key], float) and np.isfinite(doc[key])
    bad = CliRunner().invoke(app, ["sim", "gavel", "--window", "9:3", "--rate", "0"])
    assert bad.exit_code == 2
    assert "--window" in bad.output and "--rate" in bad.output
    assert doc["job_table"] == "osdi20"
    wrong = CliRunner().invoke(app, ["sim", "gavel", "--job-table", "2019"])
    assert wrong.exit_code == 2
    assert "--job-table: expected one of osdi20, artifact, got '2019'" in wrong.output


def test_a_point_draws_from_the_job_table_it_names() -> None:
    # multi-GPU, the two orders are two streams (test_gavel_synth: job 4 is LM at batch
    # size 10 on 4 GPUs in the published runs' order); the same order gives the same point
    table = load_throughputs(BUNDLED_THROUGHPUTS)
    runs = {
        order: GavelPoint("las", 2.6, 0, True, (0, 12), (4, 4, 4), job_table=order).run(table)
        for order in ("osdi20", "artifact")
    }
    assert runs["osdi20"].mean_jct_h() != runs["artifact"].mean_jct_h()
    again = GavelPoint("las", 2.6, 0, True, (0, 12), (4, 4, 4)).run(table)
    assert again.mean_jct_h() == runs["osdi20"].mean_jct_h()


_CLUSTER = """
nodes:
  - name: v100-{i}
    replicas: 2
    cpu: "32"
    memory: 256Gi
    devices:
      - {class: gpu, vendor: nvidia, model: V100, count: 4}
  - name: k80-{i}
    replicas: 2
    cpu: "32"
    memory: 256Gi
    devices:
      - {class: gpu, vendor: nvidia, model: K80, count: 4}
"""


def test_cli_replay_in_rounds(tmp_path: Path) -> None:
    trace = TRACES / "gavel" / "physical_cluster" / "max_min_fairness.trace"
    if not trace.is_file():
        pytest.skip(f"Gavel traces not present ({trace})")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(_CLUSTER)
    args = ["sim", "replay", "--cluster", str(cluster), "--workload", str(trace)]
    rounds = ["--rounds", "las,agnostic-las,fair-srtf", "--alphas", "0,1"]
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [*args, *rounds, "-o", "json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["models"] == {"K80": 8, "V100": 8}
    rows = {(r["policy"], r["alpha"]): r for r in doc["results"]}
    assert set(rows) == {
        ("las", None),
        ("agnostic-las", None),
        ("fair-srtf", 0.0),
        ("fair-srtf", 1.0),
    }
    assert all(r["finished"] == r["jobs"] == 96 for r in rows.values())
    # knowing the speeds, las gets more work out of the same devices than its agnostic twin
    aware, agnostic = rows[("las", None)], rows[("agnostic-las", None)]
    assert aware["effective_throughput"] > agnostic["effective_throughput"]
    assert aware["mean_jct_h"] < agnostic["mean_jct_h"]
    assert (out / "rounds.json").is_file() and (out / "frontier.png").is_file()
    bad = CliRunner().invoke(app, [*args, "--rounds", "nope"])
    assert bad.exit_code == 2 and "--rounds: unknown" in bad.output
    bad = CliRunner().invoke(app, [*args, "--rounds", "fair-srtf", "--alphas", "2"])
    assert bad.exit_code == 2 and "--alphas" in bad.output


def test_gavels_rule_solves_at_most_once_per_reset_interval() -> None:
    jobs = [RoundJob(f"j{i}", 400.0 * i, (1.0, 2.0), 1, 3000.0) for i in range(30)]
    gavel = _run(jobs, [2, 2], "las")
    eager = _run(jobs, [2, 2], "las", solve_on_change=True)
    assert gavel.complete and eager.complete
    assert gavel.solves <= gavel.end_time / 1920.0 + 2
    assert eager.solves > gavel.solves


def test_fair_catchup_solves_on_change_unless_told_otherwise() -> None:
    jobs = [RoundJob(f"j{i}", 400.0 * i, (1.0, 2.0), 1, 3000.0) for i in range(30)]
    assert RoundConfig("fair-catchup").on_change() and not RoundConfig("las").on_change()
    assert not RoundConfig("fair-catchup", solve_on_change=False).on_change()
    assert RoundConfig("las", solve_on_change=True).on_change()
    own = _run(jobs, [2, 2], "fair-catchup")
    gavel = _run(jobs, [2, 2], "fair-catchup", solve_on_change=False)
    assert own.complete and gavel.complete
    assert own.solves > gavel.solves
    # the sweep's point reports the rule it ran under
    point = GavelPoint("packed-fair-catchup", 4.0, 0, False, (0, 20))
    assert point.on_change() and not GavelPoint("las").on_change()
    assert not GavelPoint("packed-fair-catchup", solve_on_change=False).on_change()
