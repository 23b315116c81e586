"""The decisions of one round boundary that every round-based driver makes alike.

The core's round mode (:mod:`hetsched.scheduler.round_mode`) and the simulation engine's
round mode (:mod:`hetsched.sim.engine.round_mode`) both follow the set of active jobs,
decide when to solve the policy again (Gavel's rule) and fill the models in one order; the
rules live here once, as pure functions of what the driver holds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hetsched.rounds.mechanism import Ledger, reset_ledger, shuffled
from hetsched.rounds.policies import PolicyOptions, solve
from hetsched.rounds.problem import Allocation, FloatArray, RoundInput

__all__ = ["ORDER_SEED", "carry_allocation", "model_order", "solve_if_due"]

#: the agnostic policies' per-round model order is drawn from the seed and the round
ORDER_SEED = 1_000_003


def carry_allocation(
    x: FloatArray,
    old_ids: Sequence[str],
    new_ids: Sequence[str],
    models: int,
) -> FloatArray:
    """``X`` (jobs x ``models``) for the jobs ``new_ids``: the rows of jobs that were in
    ``old_ids`` keep their share, new jobs have none until the next solve."""
    old = {job: i for i, job in enumerate(old_ids)}
    out = np.zeros((len(new_ids), models))
    for row, job in enumerate(new_ids):
        if job in old:
            out[row] = x[old[job]]
    return out


def solve_if_due(
    policy: str,
    problem: RoundInput,
    options: PolicyOptions,
    ledger: Ledger,
    x: FloatArray,
    now: float,
    *,
    reset_s: float,
    first: bool,
    on_change: bool,
) -> tuple[Ledger, Allocation | None]:
    """Gavel's rule, for a set of active jobs that changed: when nothing was solved yet
    (``first``) or ``reset_s`` passed since the shares were last reset, fold what ``x``
    promised into the deficits, reset the shares and solve anew; otherwise solve only with
    ``on_change`` (the shares run on). Returns the ledger and the new allocation (None: keep
    ``x``)."""
    if first or now - ledger.since >= reset_s:
        ledger = reset_ledger(ledger, x, now)
    elif not on_change:
        return ledger, None
    return ledger, solve(policy, problem, options)


def model_order(policy: str, throughput: FloatArray, seed: int, round_index: int) -> list[int]:
    """The order the mechanism fills the models in: drawn anew every round for the
    heterogeneity-agnostic policies, fastest first (by the jobs' mean rate) for the
    aware ones."""
    if policy.startswith("agnostic-"):
        return shuffled(throughput.shape[1], seed * ORDER_SEED + round_index)
    return [int(j) for j in np.argsort(-throughput.mean(axis=0), kind="stable")]
