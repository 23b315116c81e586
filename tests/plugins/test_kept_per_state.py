"""Values the placement path keeps per cluster state between placements (best fit's weighted
free capacity, the ranked free shares of the fit filter, the eligible slots of a row)
against what a pass over the arrays computes now: bit for bit, after any mix of
allocations, releases, health changes and forks."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import cpu_node, gpu_node
from hetsched.cluster import ClusterState, DeviceShare, Placement, ranked
from hetsched.cluster.assign import choose_slots
from hetsched.cluster.perstate import PerState
from hetsched.cluster.ranked import choice_fits_free, ranked_free
from hetsched.framework import CycleContext
from hetsched.model.device import SHARE_UNITS, Device, Health, Node
from hetsched.model.job import DeviceChoice, DeviceRequest, Job, TaskRequest
from hetsched.plugins import bestfit
from hetsched.plugins._resources import demand, scale
from hetsched.plugins.bestfit import BestFit, BestFitScoreArgs, DimensionWeights


def cluster() -> ClusterState:
    return ClusterState(
        [
            gpu_node("a0", gpus=8, cpu=32_000),
            gpu_node("v0", gpus=4, model="V100", memory_gib=32, cpu=16_000),
            gpu_node("t0", gpus=2, model="T4", memory_gib=16, cpu=8_000),
            cpu_node("c0", cpu=32_000),
            gpu_node("a1", gpus=4, cpu=16_000),
            Node("mixed", 32_000, 64 * 1024, MIXED),
        ]
    )


#: a node of two models: a model selector admits some of its devices, not all
MIXED = tuple(
    Device(f"mixed/gpu{i}", "gpu", "nvidia", model, {"memory_gib": 80 if model == "A100" else 16})
    for i, model in enumerate(["A100", "T4", "A100", "T4", "T4"])
)


#: allocate (node, cpu, devices as (slot, share)), release the n-th oldest, flip a health
steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("allocate"),
            st.integers(0, 5),
            st.sampled_from([0, 500, 1000, 4000]),
            st.lists(st.tuples(st.integers(0, 7), st.sampled_from([100, 300, 1000])), max_size=3),
        ),
        st.tuples(st.just("release"), st.integers(0, 30), st.just(0), st.just([])),
        st.tuples(st.just("health"), st.integers(0, 22), st.booleans(), st.just([])),
    ),
    max_size=50,
)


def apply(state: ClusterState, step: tuple[Any, ...], held: list[str], index: int) -> None:
    op, arg, value, devices = step
    if op == "allocate":
        node = state.nodes[arg]
        shares: dict[str, int] = {}
        for slot, share in devices:
            if slot < len(node.devices):
                shares[node.devices[slot].id] = share
        placement = Placement(
            node.name, value, value, tuple(DeviceShare(d, s) for d, s in shares.items())
        )
        if state.check(placement) is None:
            state.allocate(f"k{index}", placement)
            held.append(f"k{index}")
    elif op == "release" and held:
        state.release(held.pop(arg % len(held)))
    elif op == "health":
        ids = [d.id for n in state.nodes for d in n.devices]
        for key in state.set_device_health(
            ids[arg % len(ids)], Health.HEALTHY if value else Health.UNHEALTHY
        ):
            state.release(key)
            held.remove(key)


def fresh_bestfit(plugin: BestFit, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
    """Best fit's score as one expression over the arrays (no kept values)."""
    state = ctx.state
    coef = plugin._weights / scale(state)
    cpu, mem, devices = float(coef[0]), float(coef[1]), float(coef[2])
    offset = float(demand(ctx) @ coef)
    leftover = (
        state.cpu_free[rows] * cpu
        + state.mem_free[rows] * mem
        + state.dev_free_total[rows] * devices
    ) - offset
    score = 100.0 * (1.0 - leftover)
    return np.asarray(np.floor(score + 1e-9) if plugin._truncate else score, np.float64)


@pytest.mark.parametrize(("by_row", "python_rows"), [(0, 0), (8, 0), (1000, 0), (8, 16)])
def test_bestfit_kept_free_scores_as_a_fresh_pass(
    by_row: int, python_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``by_row``: how many changed rows are updated one by one (0: always by numpy);
    ``python_rows``: up to how many rows are scored in plain Python (0: never)."""
    monkeypatch.setattr(bestfit, "_BY_ROW", by_row)
    monkeypatch.setattr(bestfit, "_PYTHON_ROWS", python_rows)
    request = TaskRequest(2000, 3000, (DeviceRequest.of("gpu", 1, 300),))

    @settings(max_examples=80, deadline=None)
    @given(script=steps, every=st.integers(1, 4), truncate=st.booleans())
    def check(script: list[tuple[Any, ...]], every: int, truncate: bool) -> None:
        state = cluster()
        plugin = BestFit(
            BestFitScoreArgs(
                weights=DimensionWeights(cpu=1, memory=0.5, devices=2), truncate=truncate
            )
        )
        ctx = CycleContext(state, Job("j", request), request)
        rows = np.arange(len(state))
        held: list[str] = []
        for index, step in enumerate(script):
            apply(state, step, held, index)
            if index % every == 0:  # read after one change or after several
                kept = plugin.score(ctx, rows)
                assert kept.tobytes() == fresh_bestfit(plugin, ctx, rows).tobytes()
                some = rows[index % 2 :: 2]  # a few rows, as a class refresh scores
                kept = plugin.score(ctx, some)
                assert kept.tobytes() == fresh_bestfit(plugin, ctx, some).tobytes()
        assert plugin.score(ctx, rows).tobytes() == fresh_bestfit(plugin, ctx, rows).tobytes()

    check()


def numpy_slots(
    state: ClusterState, row: int, choice: DeviceChoice, taken: set[int], prefer: str
) -> list[int] | None:
    """The device choice written over numpy arrays, as it was before plain lists."""
    eligible = state.device_mask(choice.device_class, choice.selector)[row]
    free = state.dev_free[row]
    need = SHARE_UNITS if choice.whole else choice.share
    slots = [s for s in (eligible & (free >= need)).nonzero()[0].tolist() if s not in taken]
    if len(slots) < choice.count:
        return None
    if choice.whole:
        return slots[: choice.count]
    left = free.tolist()
    if prefer == "least_used":
        return [min(slots, key=lambda s: (-left[s], s))]
    return [min(slots, key=lambda s: (left[s], s))]


CHOICES = [
    DeviceRequest.of("gpu", count, share, selector).choices[0]
    for count, share in [(1, 1000), (2, 1000), (4, 1000), (1, 300), (1, 700)]
    for selector in [None, 'device.attributes["model"] == "A100"']
]


@settings(max_examples=150, deadline=None)
@given(
    script=steps,
    row=st.integers(0, 4),
    choice=st.sampled_from(CHOICES),
    taken=st.sets(st.integers(0, 7), max_size=3),
    prefer=st.sampled_from(["most_used", "least_used"]),
)
def test_device_choice_on_lists_matches_the_arrays(
    script: list[tuple[Any, ...]], row: int, choice: DeviceChoice, taken: set[int], prefer: str
) -> None:
    state = cluster()
    held: list[str] = []
    for index, step in enumerate(script):
        apply(state, step, held, index)
        # read every step: the kept eligible slots must follow health changes
        got = choose_slots(state, row, choice, taken, prefer)  # type: ignore[arg-type]
        assert got == numpy_slots(state, row, choice, taken, prefer)


def fresh_fits(state: ClusterState, choice: DeviceChoice) -> np.ndarray:  # type: ignore[type-arg]
    """A device choice's verdict per node, counted over every slot."""
    eligible = state.device_mask(choice.device_class, choice.selector)
    need = SHARE_UNITS if choice.whole else choice.share
    return np.asarray((eligible & (state.dev_free >= need)).sum(axis=1) >= choice.count)


@pytest.mark.parametrize("by_row", [0, 4, 1000])
def test_ranked_free_shares_decide_as_counting_every_slot(
    by_row: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``by_row``: how many changed rows are ranked again one by one (0: always by numpy).
    A fork starts from the original's ranks; both go on independently."""
    monkeypatch.setattr(ranked, "_BY_ROW", by_row)
    choices = [*CHOICES, DeviceRequest.of("gpu", 3, 1000, CHOICES[1].selector).choices[0]]
    choices.append(DeviceRequest.of("gpu", 9, 1000).choices[0])  # more than any node has

    @settings(max_examples=80, deadline=None)
    @given(script=steps, fork_at=st.integers(0, 50), every=st.integers(1, 3))
    def check(script: list[tuple[Any, ...]], fork_at: int, every: int) -> None:
        states = [cluster()]
        held: list[list[str]] = [[]]
        for index, step in enumerate(script):
            if index == fork_at:
                states.append(states[0].fork())
                held.append(list(held[0]))
            for state, keys in zip(states, held, strict=True):
                apply(state, step, keys, index)
                if index % every:
                    continue
                healthy = np.where(state.dev_healthy, state.dev_free, 0)
                expected = -np.sort(-healthy, axis=1)
                assert ranked_free(state).tolist() == expected.tolist()
                rows = np.arange(len(state))[::-1][index % 3 :]
                for choice in choices:
                    fresh = fresh_fits(state, choice)
                    assert choice_fits_free(state, choice).tolist() == fresh.tolist()
                    assert choice_fits_free(state, choice, rows).tolist() == fresh[rows].tolist()

    check()


def test_per_state_values_belong_to_one_state_and_die_with_it() -> None:
    kept: PerState[str] = PerState()
    state = cluster()
    fork = state.fork()
    assert kept.get(state) is None
    kept.set(state, "original")
    assert kept.get(state) == "original" and kept.get(fork) is None
    kept.set(fork, "fork")
    assert (kept.get(state), kept.get(fork), kept.get(state)) == ("original", "fork", "original")
    kept.pop(state)
    assert kept.get(state) is None and kept.get(fork) == "fork"
    witness = weakref.ref(fork)
    del fork
    gc.collect()
    assert witness() is None and len(kept._map) == 0


STRANDING_REQUESTS = [
    TaskRequest(2000, 3000, (DeviceRequest.of("gpu", 1, 300),)),
    TaskRequest(8000, 64 * 1024, (DeviceRequest.of("gpu", 2),)),
    TaskRequest(4000, 1024),
    TaskRequest(1000, 1024, (DeviceRequest.of("gpu", 1, 1000, CHOICES[1].selector),)),
]


@settings(max_examples=80, deadline=None)
@given(script=steps, fork_at=st.integers(0, 50), typical=st.booleans())
def test_stranding_kept_across_states_scores_as_a_fresh_plugin(
    script: list[tuple[Any, ...]], fork_at: int, typical: bool
) -> None:
    """One stranding plugin scores several requests on a state (and on a fork of it) while
    allocations, releases and health changes go on; a plugin made afresh for every read
    gives the same floats, bit for bit."""
    from hetsched.plugins.stranding import Stranding, StrandingArgs

    args = StrandingArgs(typical={"gpu": {"cpu": "6", "memory": "16Gi"}} if typical else {})
    kept = Stranding(args)
    state = cluster()
    states = [state]
    held: list[list[str]] = [[]]
    for index, step in enumerate(script):
        if index == fork_at:
            states.append(state.fork())
            held.append(list(held[0]))
        for which, current in enumerate(states):
            apply(current, step, held[which], index)
            for request in STRANDING_REQUESTS:
                ctx = CycleContext(current, Job("j", request), request)
                for rows in (np.arange(len(current)), np.array([index % len(current)])):
                    got = kept.score(ctx, rows)
                    fresh = Stranding(args).score(ctx, rows)
                    assert got.tobytes() == fresh.tobytes()
