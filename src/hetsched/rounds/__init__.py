"""Round-based allocation: which share of each device model every active job gets.

``RoundInput`` (jobs x models: rates, devices, weights, work left, age) goes in, an
``Allocation`` (``X``: the fraction of the next round each job spends on each model) comes
out of ``solve(policy, problem)``; ``mechanism`` turns ``X`` into the jobs that run on
each model in the next round, round after round (Gavel's priority = X / time received);
``step`` holds the rules of a round boundary every round-based driver shares (when to
solve again, the order models are filled).
Pure functions of their inputs: the core and the drivers call them directly.
"""

from hetsched.rounds.mechanism import (
    Ledger,
    choose_round,
    priorities,
    record_round,
    reset_ledger,
    shuffled,
)
from hetsched.rounds.policies import (
    POLICIES,
    PolicyOptions,
    catchup_need,
    policy_names,
    solve,
    solves_on_change,
)
from hetsched.rounds.problem import Allocation, RoundInput, RoundInputError
from hetsched.rounds.step import ORDER_SEED, carry_allocation, model_order, solve_if_due

__all__ = [
    "ORDER_SEED",
    "POLICIES",
    "Allocation",
    "Ledger",
    "PolicyOptions",
    "RoundInput",
    "RoundInputError",
    "carry_allocation",
    "catchup_need",
    "choose_round",
    "model_order",
    "policy_names",
    "priorities",
    "record_round",
    "reset_ledger",
    "shuffled",
    "solve",
    "solve_if_due",
    "solves_on_change",
]
