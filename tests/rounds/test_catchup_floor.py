"""fair-catchup's knob ``catchup_floor``: the fraction of the max-min level every job keeps."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.framework.profile import ProfileError, RoundsSpec, parse_profile
from hetsched.rounds import Allocation, PolicyOptions, RoundInput, catchup_need, solve
from hetsched.scheduler.round_mode import RoundBook


def _needy_and_neutral() -> RoundInput:
    # one device, two 1-device jobs at rate 1: j0 is an hour old with no progress (rho
    # (3600 + 360) / 360 = 11, clipped to 4, need 16), j1 is new (need 1). Each job's rate
    # on an equal split is 0.5, so las' level is 2 x X and its optimum gives each 0.5.
    return RoundInput.of(
        ["j0", "j1"],
        ["m0"],
        [[1.0], [1.0]],
        [1, 1],
        [1],
        elapsed=[3600.0, 0.0],
        isolated_time=[0.0, 0.0],
    )


@pytest.mark.parametrize(
    ("floor", "shares"),
    [
        (1.0, [0.5, 0.5]),  # the whole las share each: the needy job gets no more
        (0.5, [0.75, 0.25]),  # j1 keeps half its las share, the rest goes by need
        (0.0, [1.0, 0.0]),  # by need alone: all of it to the job behind its pace
    ],
)
def test_the_floor_keeps_that_fraction_of_the_las_share(floor: float, shares: list[float]) -> None:
    p = _needy_and_neutral()
    assert catchup_need(p).tolist() == pytest.approx([16.0, 1.0])
    a = solve("fair-catchup", p, PolicyOptions(catchup_floor=floor))
    assert a.x[:, 0].tolist() == pytest.approx(shares, abs=1e-6)
    assert a.check(p) == []


def test_the_default_is_the_whole_floor() -> None:
    p = _needy_and_neutral()
    assert PolicyOptions().catchup_floor == 1.0
    # without options fair-catchup is as before the knob: each job its whole las share
    assert solve("fair-catchup", p).x[:, 0].tolist() == pytest.approx([0.5, 0.5], abs=1e-6)


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_a_floor_outside_0_1_is_refused_by_name(bad: float) -> None:
    with pytest.raises(ValueError, match=r"catchup_floor must be in 0\.\.1"):
        PolicyOptions(catchup_floor=bad)


# -- properties ---------------------------------------------------------------------------


@st.composite
def _problems(draw: st.DrawFn) -> RoundInput:
    n = draw(st.integers(1, 8))
    m = draw(st.integers(1, 3))
    rates = st.one_of(st.just(0.0), st.floats(0.1, 20.0))
    elapsed = [draw(st.floats(0.0, 1e4)) for _ in range(n)]
    return RoundInput.of(
        [f"j{i}" for i in range(n)],
        [f"m{j}" for j in range(m)],
        np.array([[draw(rates) for _ in range(m)] for _ in range(n)]),
        [draw(st.sampled_from([1, 1, 2, 4])) for _ in range(n)],
        [draw(st.integers(0, 6)) for _ in range(m)],
        elapsed=elapsed,
        isolated_time=[e * draw(st.floats(0.1, 1.0)) for e in elapsed],
    )


def _levels(p: RoundInput, a: Allocation) -> np.ndarray:
    prop = p.proportional_rates()
    level = a.rates(p.throughput) * p.scale / (p.weight * np.where(prop > 0, prop, 1.0))
    return np.asarray(level[p.runnable().any(axis=1)])


def _need_weighted(p: RoundInput, a: Allocation) -> float:
    best = p.best_rates()
    gain = (a.x * p.throughput).sum(axis=1) * p.scale / np.where(best > 0, best, 1.0)
    return float((gain * catchup_need(p)).sum())


@settings(max_examples=40, deadline=None)
@given(_problems(), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_a_lower_floor_never_serves_need_less_and_keeps_its_fraction(
    p: RoundInput, f1: float, f2: float
) -> None:
    low, high = sorted((f1, f2))
    top = _levels(p, solve("las", p))
    a_low = solve("fair-catchup", p, PolicyOptions(catchup_floor=low))
    a_high = solve("fair-catchup", p, PolicyOptions(catchup_floor=high))
    for floor, a in ((low, a_low), (high, a_high)):
        assert a.check(p) == []
        if top.size:
            assert (_levels(p, a) >= floor * top.min() * (1 - 1e-5) - 1e-7).all()
    # the low floor's feasible set holds the high floor's: its objective is no worse
    scale = max(1.0, _need_weighted(p, a_high))
    assert _need_weighted(p, a_low) >= _need_weighted(p, a_high) - 1e-5 * scale


# -- the profile's rounds section carries it to the core ----------------------------------


def test_the_profile_sets_the_floor_of_the_core_rounds() -> None:
    spec = parse_profile({"rounds": {"policy": "fair-catchup", "catchup_floor": 0.25}}).rounds
    assert spec is not None
    assert RoundBook(spec, seed=0).options.catchup_floor == 0.25
    assert RoundsSpec().catchup_floor == 1.0


def test_a_bad_floor_in_the_profile_names_the_field() -> None:
    with pytest.raises(ProfileError) as caught:
        parse_profile({"rounds": {"catchup_floor": 1.5}})
    assert "rounds.catchup_floor: Input should be less than or equal to 1" in str(caught.value)
