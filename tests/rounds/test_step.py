"""The rules of a round boundary both round modes share (``hetsched.rounds.step``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetsched.rounds import (
    ORDER_SEED,
    Ledger,
    PolicyOptions,
    RoundInput,
    carry_allocation,
    model_order,
    shuffled,
    solve_if_due,
)

MODELS = ("v100", "p100", "k80")


def _problem(ids: list[str]) -> RoundInput:
    rates = np.array([[3.0, 2.0, 1.0]] * len(ids))
    return RoundInput.of(ids, MODELS, rates, [1] * len(ids), [1, 1, 1])


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (["a", "b"], ["b", "c"], [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]),
        (["a", "b"], ["a"], [[1.0, 0.0, 0.0]]),
        ([], ["a"], [[0.0, 0.0, 0.0]]),
        (["a"], [], []),
    ],
)
def test_kept_jobs_keep_their_share_and_new_ones_have_none(
    old: list[str], new: list[str], expected: list[list[float]]
) -> None:
    x = np.eye(len(old), 3)
    out = carry_allocation(x, old, new, 3)
    assert out.shape == (len(new), 3)
    assert out.tolist() == expected


@pytest.mark.parametrize(
    ("first", "since", "now", "on_change", "solved", "reset"),
    [
        (True, 0.0, 10.0, False, True, True),  # nothing solved yet: reset and solve
        (False, 0.0, 2000.0, False, True, True),  # reset_s passed: reset and solve
        (False, 0.0, 100.0, False, False, False),  # Gavel's rule: wait for reset_s
        (False, 0.0, 100.0, True, True, False),  # on change: solve, the shares run on
    ],
)
def test_gavels_rule_for_solving_again(
    first: bool, since: float, now: float, on_change: bool, solved: bool, reset: bool
) -> None:
    problem = _problem(["a", "b"])
    ledger = Ledger.start(problem.job_ids, MODELS, since, prior_s=180.0)
    x = np.zeros((2, 3))
    options = PolicyOptions()
    after, allocation = solve_if_due(
        "las", problem, options, ledger, x, now, reset_s=1920.0, first=first, on_change=on_change
    )
    assert (allocation is not None) == solved
    assert (after.since == now) == reset
    if allocation is not None:
        assert allocation.x.shape == (2, 3)


def test_aware_policies_fill_the_fastest_model_first() -> None:
    throughput = np.array([[1.0, 3.0, 2.0], [1.0, 5.0, 0.5]])
    assert model_order("las", throughput, seed=0, round_index=7) == [1, 2, 0]


@given(seed=st.integers(0, 1000), round_index=st.integers(0, 1000))
def test_agnostic_policies_draw_the_order_from_seed_and_round(seed: int, round_index: int) -> None:
    throughput = np.ones((2, 3))
    order = model_order("agnostic-las", throughput, seed, round_index)
    assert sorted(order) == [0, 1, 2]
    assert order == shuffled(3, seed * ORDER_SEED + round_index)
