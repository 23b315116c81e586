"""The round-robin mechanism that realises an allocation: literal rounds and properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.rounds import (
    Ledger,
    RoundInput,
    choose_round,
    priorities,
    record_round,
    reset_ledger,
    shuffled,
    solve,
)

ROUND = 360.0


def run_rounds(p: RoundInput, x: np.ndarray, rounds: int, **kw: object) -> np.ndarray:
    """Time each job received on each model over ``rounds`` rounds."""
    ledger = Ledger.start(p.job_ids, p.models, now=0.0, prior_s=ROUND / 2)
    got = np.zeros((p.n, p.m))
    for _ in range(rounds):
        chosen = choose_round(x, ledger, p, **kw)  # type: ignore[arg-type]
        used = np.zeros(p.m, np.int64)
        for i, j in enumerate(chosen):
            if j >= 0:
                used[j] += p.scale[i]
                got[i, j] += ROUND
        assert (used <= p.capacity).all()  # never more devices than there are
        ledger = record_round(ledger, chosen, ROUND)
    return got


def test_three_jobs_share_one_device_by_thirds() -> None:
    p = RoundInput.of(["a", "b", "c"], ["gpu"], [[1.0], [1.0], [1.0]], [1, 1, 1], [1])
    x = np.full((3, 1), 1 / 3)
    got = run_rounds(p, x, 30)
    assert got[:, 0].tolist() == [10 * ROUND] * 3  # round-robin: 10 rounds each


def test_unequal_shares_are_followed() -> None:
    p = RoundInput.of(["a", "b"], ["gpu"], [[1.0], [1.0]], [1, 1], [1])
    x = np.array([[0.75], [0.25]])
    got = run_rounds(p, x, 40)
    assert got[:, 0] / got.sum() == pytest.approx([0.75, 0.25], abs=0.03)


def test_first_round_and_priorities() -> None:
    p = RoundInput.of(["a", "b"], ["v100", "k80"], [[4.0, 1.0], [2.0, 1.0]], [1, 1], [1, 1])
    x = np.array([[0.6, 0.4], [0.4, 0.6]])
    ledger = Ledger.start(p.job_ids, p.models, now=0.0)
    assert priorities(x, ledger).reshape(-1).tolist() == pytest.approx([1.2, 0.8, 0.8, 1.2])
    # v100 first: a has the higher priority there; b takes the k80
    assert choose_round(x, ledger, p).tolist() == [0, 1]
    # k80 first: b has the higher priority there; a takes the v100
    assert choose_round(x, ledger, p, order=[1, 0]).tolist() == [0, 1]
    after = record_round(ledger, np.array([0, 1]), ROUND)
    assert after.received.tolist() == [[540.0, 180.0], [180.0, 540.0]]
    # a ran on v100, so b is now furthest behind there
    assert choose_round(x, after, p).tolist() == [1, 0]


def test_work_conservation_and_fifo() -> None:
    # X gives nothing to c, but a device is free: c runs there (work conserving)
    p = RoundInput.of(["a", "b", "c"], ["gpu"], [[1.0]] * 3, [1, 1, 1], [3])
    x = np.array([[1.0], [1.0], [0.0]])
    ledger = Ledger.start(p.job_ids, p.models, now=0.0)
    assert choose_round(x, ledger, p).tolist() == [0, 0, 0]
    assert choose_round(x, ledger, p, work_conserving=False).tolist() == [0, 0, -1]


def test_big_jobs_wait_for_room_and_small_ones_fill() -> None:
    p = RoundInput.of(["big", "s1", "s2"], ["gpu"], [[1.0]] * 3, [4, 1, 1], [4])
    x = np.array([[0.5], [1.0], [1.0]])
    got = run_rounds(p, x, 20)
    # the 4-device job runs in the rounds the small ones leave it; every device is used
    assert got[0, 0] > 0 and got[1, 0] > 0 and got[2, 0] > 0


def test_follow_and_reset() -> None:
    ledger = Ledger.start(["a", "b"], ["gpu"], now=0.0, prior_s=180.0)
    ledger = record_round(ledger, np.array([0, -1]), np.array([360.0, 0.0]))
    moved = ledger.follow(["b", "c"])
    assert moved.job_ids == ("b", "c")
    assert moved.received[:, 0].tolist() == [180.0, 180.0]
    reset = reset_ledger(ledger, np.array([[0.5], [0.5]]), now=720.0)
    # a should have had 360 s and got 360; b should have had 360 and got none
    assert reset.deficit[:, 0].tolist() == [0.0, 360.0]
    assert reset.received[:, 0].tolist() == [180.0, 180.0] and reset.since == 720.0
    with pytest.raises(ValueError, match=r"ledger\.follow"):
        choose_round(
            np.zeros((2, 1)), moved, RoundInput.of(["a", "b"], ["gpu"], [[1.0]] * 2, [1, 1], [1])
        )


def test_shuffled_is_a_seeded_permutation() -> None:
    assert sorted(shuffled(3, 7)) == [0, 1, 2]
    assert shuffled(3, 7) == shuffled(3, 7)


@st.composite
def problems(draw: st.DrawFn) -> RoundInput:
    n = draw(st.integers(1, 10))
    m = draw(st.integers(1, 3))
    thr = [[draw(st.sampled_from([0.0, 0.5, 1.0, 3.0])) for _ in range(m)] for _ in range(n)]
    scale = [draw(st.sampled_from([1, 1, 2, 4])) for _ in range(n)]
    capacity = [draw(st.integers(0, 6)) for _ in range(m)]
    return RoundInput.of(
        [f"j{i}" for i in range(n)], [f"m{j}" for j in range(m)], thr, scale, capacity
    )


@settings(max_examples=60, deadline=None)
@given(problems(), st.sampled_from(["las", "max-throughput", "agnostic-las", "fifo"]))
def test_rounds_never_overcommit_and_never_idle_a_fitting_job(p: RoundInput, name: str) -> None:
    x = solve(name, p).x
    ledger = Ledger.start(p.job_ids, p.models, now=0.0)
    for r in range(6):
        chosen = choose_round(x, ledger, p, order=shuffled(p.m, r))
        used = np.zeros(p.m, np.int64)
        for i, j in enumerate(chosen):
            if j >= 0:
                assert p.runnable()[i, j]
                used[j] += p.scale[i]
        assert (used <= p.capacity).all()
        idle = chosen < 0
        for j in range(p.m):  # work conservation: no idle job fits in what is left
            fits = idle & p.runnable()[:, j] & (p.scale <= p.capacity[j] - used[j])
            assert not fits.any()
        ledger = record_round(ledger, chosen, ROUND)
