"""Round policies: literal allocations, optimality against each other, and the knob."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.rounds import (
    Allocation,
    PolicyOptions,
    RoundInput,
    RoundInputError,
    catchup_need,
    policy_names,
    solve,
    solves_on_change,
)


def problem(
    thr: list[list[float]], scale: list[int], capacity: list[int], **kw: object
) -> RoundInput:
    ids = [f"j{i}" for i in range(len(thr))]
    models = [f"m{j}" for j in range(len(capacity))]
    return RoundInput.of(ids, models, thr, scale, capacity, **kw)  # type: ignore[arg-type]


def test_policy_names() -> None:
    names = policy_names()
    for base in ("las", "ftf", "max-throughput", "min-makespan", "fifo", "fair-throughput"):
        assert base in names and f"agnostic-{base}" in names
    with pytest.raises(KeyError, match="unknown round policy 'srtf'"):
        solve("srtf", problem([[1.0]], [1], [1]))


def test_las_puts_each_job_where_it_is_relatively_fastest() -> None:
    # j0 runs 4x faster on m0; j1 runs alike everywhere: Gavel gives m0 to j0
    p = problem([[4.0, 1.0], [1.0, 1.0]], [1, 1], [1, 1])
    las = solve("las", p)
    assert las.check(p) == []
    assert las.rates(p.throughput).tolist() == pytest.approx([4.0, 1.0], abs=1e-5)
    # both get a full device either way: the max-min level is 1 (j1 at its equal share)
    assert las.objective == pytest.approx(1.0)


def test_las_shares_device_time_by_weight() -> None:
    # one device, two equal jobs: weight 3 gets 3x the time of weight 1
    p = problem([[1.0], [1.0]], [1, 1], [1], weight=[3.0, 1.0])
    x = solve("las", p).x
    assert x[:, 0].tolist() == pytest.approx([0.75, 0.25], abs=1e-5)
    # a 2-device job and a 1-device job on 2 devices: equal device time, one device each:
    # the 2-device job runs half of the time, the other all of it
    q = problem([[1.0], [1.0]], [2, 1], [2])
    x = solve("las", q).x
    assert x[:, 0].tolist() == pytest.approx([0.5, 1.0], abs=1e-5)


def test_min_makespan_literal() -> None:
    # one device: jobs of 100 and 300 steps at 1 step/s share it, both end at 400 s
    p = problem([[1.0], [1.0]], [1, 1], [1], remaining=[100.0, 300.0])
    result = solve("min-makespan", p)
    assert result.objective == pytest.approx(400.0, rel=1e-4)
    assert result.x[:, 0].tolist() == pytest.approx([0.25, 0.75], abs=1e-4)


def test_max_throughput_uses_fastest_models() -> None:
    p = problem([[4.0, 1.0], [2.0, 1.0]], [1, 1], [1, 1])
    x = solve("max-throughput", p).x
    # j0 gains 4x on m0, j1 only 2x: m0 goes to j0, m1 to j1; every device busy
    assert x.reshape(-1).tolist() == pytest.approx([1.0, 0.0, 0.0, 1.0], abs=1e-6)


def test_ftf_literal() -> None:
    # two jobs on one device, each alone would get half of it (isolated rate 0.5);
    # j0 has waited 100 s; equal shares give both rho = 1 at the start
    p = problem([[1.0], [1.0]], [1, 1], [1], remaining=[100.0, 100.0], elapsed=[0.0, 0.0])
    result = solve("ftf", p)
    assert result.objective == pytest.approx(1.0, rel=0.011)
    assert result.x[:, 0].tolist() == pytest.approx([0.5, 0.5], abs=0.01)
    waited = problem([[1.0], [1.0]], [1, 1], [1], remaining=[100.0, 100.0], elapsed=[100.0, 0.0])
    x = solve("ftf", waited).x[:, 0]
    assert x[0] > x[1]  # the job that waited gets more


def test_fifo_literal() -> None:
    thr = [[1.0, 3.0], [2.0, 1.0], [1.0, 1.0], [1.0, 1.0]]
    p = problem(thr, [1, 1, 2, 1], [1, 1], elapsed=[40.0, 30.0, 20.0, 10.0])
    x = solve("fifo", p).x
    # oldest first, each on its fastest model with room; j2 (2 devices) fits nowhere now
    # and strict FIFO stops there, so j3 waits even though nothing is left anyway
    assert x.tolist() == [[0.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    # the agnostic twin keeps running jobs where they are
    q = problem(thr, [1, 1, 2, 1], [1, 1], elapsed=[40.0, 30.0, 20.0, 10.0], current=[0, 1, -1, -1])
    assert solve("agnostic-fifo", q).x.tolist() == [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]


def test_jobs_that_cannot_fit_get_nothing() -> None:
    # j0 needs 4 devices, m0 has 2 and m1 has 8; j1 cannot run on m1 at all
    p = problem([[5.0, 1.0], [1.0, 0.0]], [4, 1], [2, 8])
    for name in policy_names():
        result = solve(name, p)
        assert result.check(p) == [], name
        assert result.x[0, 0] == 0 and result.x[1, 1] == 0


def test_empty_and_unrunnable() -> None:
    empty = RoundInput.of([], ["m0"], np.zeros((0, 1)), [], [4])
    for name in policy_names():
        assert solve(name, empty).x.shape == (0, 1)
    stuck = problem([[0.0]], [1], [1])
    for name in policy_names():
        assert solve(name, stuck).x.tolist() == [[0.0]]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"thr": [[1.0, 2.0]]}, r"throughput: expected shape \(1, 1\)"),
        ({"thr": [[-1.0]]}, "throughput: must be >= 0"),
        ({"scale": [0]}, "scale: expected 1 values >= 1"),
        ({"capacity": [-1]}, "capacity: expected 1 values >= 0"),
        ({"weight": [0.0]}, "weight: must be > 0"),
        ({"remaining": [float("nan")]}, "remaining: values must be finite"),
        ({"current": [3]}, "current: expected 1 model indices or -1"),
        ({"reference": 2}, "reference: expected a model index 0..0"),
    ],
)
def test_round_input_errors(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"thr": [[1.0]], "scale": [1], "capacity": [1]}
    args.update(kwargs)
    thr, scale, capacity = args.pop("thr"), args.pop("scale"), args.pop("capacity")
    with pytest.raises(RoundInputError, match=message):
        RoundInput.of(["a"], ["m0"], thr, scale, capacity, **args)  # type: ignore[arg-type]
    with pytest.raises(RoundInputError, match="duplicate"):
        RoundInput.of(["a", "a"], ["m0"], [[1.0], [1.0]], [1, 1], [1])


# -- properties over random problems -----------------------------------------------------


@st.composite
def problems(draw: st.DrawFn) -> RoundInput:
    n = draw(st.integers(1, 12))
    m = draw(st.integers(1, 3))
    rates = st.one_of(st.just(0.0), st.floats(0.1, 20.0))
    thr = np.array([[draw(rates) for _ in range(m)] for _ in range(n)])
    scale = [draw(st.sampled_from([1, 1, 1, 2, 4])) for _ in range(n)]
    capacity = [draw(st.integers(0, 8)) for _ in range(m)]
    weight = [draw(st.sampled_from([1.0, 1.0, 5.0])) for _ in range(n)]
    remaining = [draw(st.floats(10.0, 1e5)) for _ in range(n)]
    elapsed = [draw(st.floats(0.0, 1e4)) for _ in range(n)]
    return RoundInput.of(
        [f"j{i}" for i in range(n)],
        [f"m{j}" for j in range(m)],
        thr,
        scale,
        capacity,
        weight=weight,
        remaining=remaining,
        elapsed=elapsed,
        isolated_time=[e / 2 for e in elapsed],
        current=[-1] * n,
    )


def _las_level(p: RoundInput, a: Allocation) -> float:
    prop = p.proportional_rates()
    jobs = p.runnable().any(axis=1)
    if not jobs.any():
        return 0.0
    level = a.rates(p.throughput) * p.scale / (p.weight * np.where(prop > 0, prop, 1.0))
    return float(level[jobs].min())


def _efficiency(p: RoundInput, a: Allocation) -> float:
    best = p.best_rates()
    ratio = np.where(best[:, None] > 0, p.throughput / np.where(best > 0, best, 1)[:, None], 0)
    return float((p.scale[:, None] * a.x * ratio).sum())


def _makespan(p: RoundInput, a: Allocation) -> float:
    jobs = (p.best_rates() > 0) & (p.remaining > 0)
    rates = a.rates(p.throughput)[jobs]
    return float("inf") if (rates <= 0).any() else float((p.remaining[jobs] / rates).max(initial=0))


@settings(max_examples=25, deadline=None)
@given(problems())
def test_every_policy_respects_capacity_and_time(p: RoundInput) -> None:
    for name in policy_names():
        result = solve(name, p, PolicyOptions(seed=3))
        assert result.check(p) == [], (name, result.check(p))


@settings(max_examples=25, deadline=None)
@given(problems())
def test_each_aware_policy_beats_every_other_on_its_own_objective(p: RoundInput) -> None:
    others = [solve(name, p) for name in policy_names()]
    las, tput, span = solve("las", p), solve("max-throughput", p), solve("min-makespan", p)
    for other in others:
        # within the second stage's documented slack (1e-6) and HiGHS' tolerances
        assert _las_level(p, las) >= _las_level(p, other) - 1e-5 * max(1, _las_level(p, other))
        assert _efficiency(p, tput) >= _efficiency(p, other) - 1e-5 * max(1, _efficiency(p, other))
        assert _makespan(p, span) <= _makespan(p, other) * (1 + 1e-5)


@settings(max_examples=20, deadline=None)
@given(problems())
def test_lp_policies_use_every_device_they_can(p: RoundInput) -> None:
    """The second stage spends what the optimum leaves: no device idles while a job that
    fits there has time to spare."""
    lp_policies = [n for n in policy_names() if not n.endswith("fifo")]
    for name in lp_policies:
        result = solve(name, p)
        used = (p.scale[:, None] * result.x).sum(axis=0)
        spare = result.x.sum(axis=1) < 1 - 1e-6
        for j in range(p.m):
            hungry = spare & p.runnable()[:, j] & (p.scale <= p.capacity[j] - used[j] + 1e-6)
            assert not hungry.any(), (name, j, used, p.capacity)


@settings(max_examples=25, deadline=None)
@given(problems())
def test_ftf_is_optimal_within_its_tolerance(p: RoundInput) -> None:
    iso = p.isolated_rates()
    best = p.best_rates()
    jobs = (best > 0) & (iso > 0) & (p.remaining > 0)
    base = p.isolated_time + p.remaining / np.where(iso > 0, iso, 1)

    def worst(a: Allocation) -> float:
        rates = a.rates(p.throughput)[jobs]
        if not jobs.any():
            return 0.0
        if (rates <= 0).any():
            return float("inf")
        return float(((p.elapsed[jobs] + p.remaining[jobs] / rates) / base[jobs]).max())

    ftf = solve("ftf", p, PolicyOptions(rtol=0.01))
    for name in policy_names():
        assert worst(ftf) <= worst(solve(name, p)) * 1.0101 + 1e-9, name


@settings(max_examples=25, deadline=None)
@given(problems())
def test_the_knob_trades_fairness_for_throughput(p: RoundInput) -> None:
    levels, effs = [], []
    for alpha in (0.0, 0.25, 0.5, 0.75, 1.0):
        a = solve("fair-throughput", p, PolicyOptions(alpha=alpha))
        levels.append(_las_level(p, a))
        effs.append(_efficiency(p, a))
    las, tput = solve("las", p), solve("max-throughput", p)
    assert levels[0] == pytest.approx(_las_level(p, las), rel=1e-5, abs=1e-7)
    assert effs[-1] == pytest.approx(_efficiency(p, tput), rel=1e-6, abs=1e-7)
    assert all(b >= a - 1e-6 * max(1, a) for a, b in itertools.pairwise(effs))
    top = levels[0]
    for alpha, level in zip((0.0, 0.25, 0.5, 0.75, 1.0), levels, strict=True):
        assert level >= (1 - alpha) * top * (1 - 1e-5) - 1e-9


@pytest.mark.parametrize(
    ("alpha", "expected"),
    [
        # alpha 0: the max-min share (las): half the device each
        (0.0, [[0.5], [0.5]]),
        # alpha 1: all of it to the job closest to its end
        (1.0, [[0.0], [1.0]]),
        # in between: the long job keeps half its las share, the short one takes the rest
        (0.5, [[0.25], [0.75]]),
    ],
)
def test_fair_srtf_gives_what_the_floor_leaves_to_the_shortest(
    alpha: float, expected: list[list[float]]
) -> None:
    p = problem([[1.0], [1.0]], [1, 1], [1], remaining=[1000.0, 10.0])
    a = solve("fair-srtf", p, PolicyOptions(alpha=alpha))
    assert a.x == pytest.approx(np.array(expected), abs=1e-6)


@settings(max_examples=25, deadline=None)
@given(problems(), st.sampled_from([0.0, 0.3, 0.7, 1.0]))
def test_fair_srtf_keeps_every_job_at_its_floor(p: RoundInput, alpha: float) -> None:
    top = _las_level(p, solve("las", p))
    a = solve("fair-srtf", p, PolicyOptions(alpha=alpha))
    assert a.check(p) == []
    assert _las_level(p, a) >= (1 - alpha) * top * (1 - 1e-5) - 1e-9


@settings(max_examples=25, deadline=None)
@given(problems(), st.integers(1, 4))
def test_identical_jobs_get_identical_shares_and_the_same_optimum(
    p: RoundInput, copies: int
) -> None:
    """las and its knob solve one row per class of identical jobs: copying every job
    keeps the max-min level (the devices are shared by more jobs, so it scales by the
    copies at most) and every copy gets the same row."""
    rows = np.repeat(np.arange(p.n), copies)
    twin = RoundInput.of(
        [f"{p.job_ids[i]}-{k}" for i in range(p.n) for k in range(copies)],
        p.models,
        p.throughput[rows],
        p.scale[rows],
        p.capacity,
        weight=p.weight[rows],
        remaining=p.remaining[rows],
        elapsed=p.elapsed[rows],
        isolated_time=p.isolated_time[rows],
    )
    for name in ("las", "agnostic-las", "max-throughput", "fair-throughput"):
        result = solve(name, twin)
        assert result.check(twin) == [], name
        x = result.x.reshape(p.n, copies, p.m)
        assert np.allclose(x, x[:, :1, :], atol=1e-9), name
    single = _las_level(p, solve("las", p))
    level = _las_level(twin, solve("las", twin))
    assert level <= single * (1 + 1e-6) + 1e-9
    assert level >= single / copies * (1 - 1e-6) - 1e-9


@settings(max_examples=20, deadline=None)
@given(problems())
def test_gavels_central_solutions_reach_the_same_optimum(p: RoundInput) -> None:
    """With central=True (Gavel's interior-point solutions) las solves its max-min program
    alone: the same level as the default, and never more effective throughput."""
    central = solve("las", p, PolicyOptions(central=True))
    vertex = solve("las", p)
    assert central.check(p) == []
    assert _las_level(p, central) == pytest.approx(_las_level(p, vertex), rel=1e-5, abs=1e-7)
    assert _efficiency(p, central) <= _efficiency(p, vertex) * (1 + 1e-6) + 1e-7
    if p.runnable().any():
        assert (central.solves, vertex.solves) == (1, 2)


def test_central_las_spreads_equally_good_time() -> None:
    # two identical jobs, two identical devices of two models: any split is optimal; the
    # interior point gives both jobs time on both models, a vertex does not need to
    p = RoundInput.of(["a", "b"], ["m0", "m1"], [[1.0, 1.0], [1.0, 1.0]], [1, 1], [1, 1])
    x = solve("las", p, PolicyOptions(central=True)).x
    assert x.sum(axis=1) == pytest.approx([1.0, 1.0], abs=1e-6)
    assert (x > 0.1).all()


@pytest.mark.parametrize(
    ("rates", "las_rates", "catchup_rates"),
    [
        # the same speed everywhere: las splits the spare device time between the twins
        # (7 of 8 devices after j2's one: 0.875 each); fair-catchup gives j1, which is
        # behind its isolated pace, all the time it can use and j0 the rest
        ([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]], [0.875, 0.875, 1.0], [0.75, 1.0, 1.0]),
        # m0 twice as fast for the twins: j1 gets m0 all the time (rate 2), j0 keeps its
        # floor and more on m1 (0.75), where las gives both the same mix (1.375)
        ([[2.0, 1.0], [2.0, 1.0], [1.0, 1.0]], [1.375, 1.375, 1.0], [0.75, 2.0, 1.0]),
    ],
)
def test_fair_catchup_gives_what_las_leaves_to_the_job_behind(
    rates: list[list[float]], las_rates: list[float], catchup_rates: list[float]
) -> None:
    # twins j0 and j1 (4 devices each) and a 1-device j2 that bounds the max-min level at 1;
    # both twins are 2 h old, j0 made 2 h of isolated progress (on pace), j1 only 0.5 h
    p = problem(
        rates,
        [4, 4, 1],
        [4, 4],
        elapsed=[7200.0, 7200.0, 7200.0],
        isolated_time=[7200.0, 1800.0, 7200.0],
    )
    las, catchup = solve("las", p), solve("fair-catchup", p)
    assert las.rates(p.throughput).tolist() == pytest.approx(las_rates, abs=1e-5)
    assert catchup.rates(p.throughput).tolist() == pytest.approx(catchup_rates, abs=1e-5)
    # the same max-min level: every job keeps its las share
    assert catchup.objective == pytest.approx(las.objective, rel=1e-6)
    assert _las_level(p, catchup) == pytest.approx(_las_level(p, las), rel=1e-5)
    assert catchup.check(p) == []


@settings(max_examples=25, deadline=None)
@given(problems())
def test_fair_catchup_keeps_every_job_at_its_las_floor(p: RoundInput) -> None:
    top = _las_level(p, solve("las", p))
    a = solve("fair-catchup", p)
    assert a.check(p) == []
    assert _las_level(p, a) >= top * (1 - 1e-5) - 1e-9
    assert solve("agnostic-fair-catchup", p).check(p) == []


@settings(max_examples=50, deadline=None)
@given(st.floats(0.0, 1e6), st.floats(0.0, 1e6), st.floats(0.0, 1e6), st.floats(0.0, 1e6))
def test_catchup_need_grows_with_waiting_and_falls_with_progress(
    e1: float, e2: float, i1: float, i2: float
) -> None:
    p = problem([[1.0]] * 4, [1] * 4, [1], elapsed=[e1, e2, e1, e1], isolated_time=[i1, i1, i1, i2])
    need = catchup_need(p)
    assert ((need >= 1 / 16 - 1e-12) & (need <= 16 + 1e-12)).all()
    assert (need[1] - need[0]) * (e2 - e1) >= -1e-12  # later, same progress: needier
    assert (need[3] - need[2]) * (i2 - i1) <= 1e-12  # more progress, same age: less needy
    # a new job (no age, no progress) is neutral
    assert catchup_need(problem([[1.0]], [1], [1])).tolist() == [1.0]


def test_only_feedback_policies_solve_on_change_by_default() -> None:
    assert solves_on_change("fair-catchup") and solves_on_change("agnostic-fair-catchup")
    assert not any(solves_on_change(n) for n in policy_names() if "fair-catchup" not in n)
