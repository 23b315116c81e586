"""Request classes: the runtime caches feasibility and raw scores per request and refreshes
only the rows that changed; every placement must be the one a fresh pass would choose."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import cpu_node, gpu_node
from hetsched.cluster import ClusterState, Placement
from hetsched.framework import CycleContext, Framework, parse_profile, runtime
from hetsched.model.device import Health
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.plugins import fit
from hetsched.plugins.fit import free_choice_fits

PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    "bestfit": {"score": ["bestfit"]},
    "firstfit": {"score": ["firstfit"]},
    "random-ties": {"score": ["bestfit"], "tie_break": "random"},
}


def cluster() -> list[Any]:
    return [
        gpu_node("a0", gpus=8, cpu=32_000),
        gpu_node("a1", gpus=4, cpu=16_000),
        gpu_node("v0", gpus=4, model="V100", memory_gib=32, cpu=16_000, labels={"zone": "b"}),
        gpu_node("t0", gpus=2, model="T4", memory_gib=16, cpu=8_000, labels={"zone": "b"}),
        cpu_node("c0", cpu=32_000),
    ]


requests = st.builds(
    lambda cpu, gpus, share, model, zone: TaskRequest(
        cpu,
        cpu,
        (
            (
                DeviceRequest.of(
                    "gpu",
                    gpus,
                    share if gpus == 1 else 1000,
                    f'device.attributes["model"] == "{model}"' if model else None,
                ),
            )
            if gpus
            else ()
        ),
        {"zone": "b"} if zone else {},
    ),
    st.sampled_from([1000, 2000, 4000]),
    st.sampled_from([0, 1, 1, 2, 4]),
    st.sampled_from([1000, 500, 250]),
    st.sampled_from([None, "A100", "V100"]),
    st.booleans(),
)
#: place one of a few requests (so classes repeat), release the n-th oldest placement,
#: flip a device's health, or take a node out
steps = st.lists(
    st.one_of(
        st.tuples(st.just("place"), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("release"), st.integers(0, 20), st.just(False)),
        st.tuples(st.just("health"), st.integers(0, 17), st.booleans()),
        st.tuples(st.just("remove"), st.integers(0, 4), st.just(False)),
    ),
    max_size=60,
)


def assert_fresh(framework: Framework, ctx: CycleContext) -> None:
    """The class's cached totals are, bit for bit, a fresh pass's (and -inf elsewhere)."""
    classes = framework._classes.get(ctx.state)
    assert classes is not None
    entry = classes[(ctx.request, ctx.job.best_effort)]
    rows = np.flatnonzero(framework.feasible(ctx))
    expected = np.full(len(ctx.state), -np.inf)
    if rows.size:
        expected[rows] = framework.scores(ctx, rows)
    assert entry.total.tobytes() == expected.tobytes()
    # the fit filter's per-choice masks, kept per state, agree with a pass over every row
    for device_request in ctx.request.devices:
        for choice in device_request.choices:
            kept = free_choice_fits(ctx.state, choice)
            fresh = (
                (ctx.state.device_mask(choice.device_class, choice.selector))
                & (ctx.state.dev_free >= (1000 if choice.whole else choice.share))
            ).sum(axis=1) >= choice.count
            assert (kept == fresh).all()


@pytest.mark.parametrize("by_rows", [True, False])
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_cached_classes_place_as_a_fresh_pass_does(
    profile: str, by_rows: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``by_rows``: refresh row by row however many rows changed (a small cluster would
    otherwise be refilled whole at almost every change)."""
    if by_rows:
        monkeypatch.setattr(runtime, "_REFRESH_WHOLE", 1.0)
        monkeypatch.setattr(fit, "_REFRESH_WHOLE", 1.0)
    spec = parse_profile(PROFILES[profile])

    @settings(max_examples=60, deadline=None)
    @given(pool=st.lists(requests, min_size=1, max_size=4), script=steps)
    def check(pool: list[TaskRequest], script: list[tuple[str, Any, bool]]) -> None:
        runs = []
        for cached in (True, False):
            state = ClusterState(cluster())
            framework = Framework(spec, seed=3)
            assert framework.classes_cached
            framework.classes_cached = cached
            devices = [d.id for n in state.nodes for d in n.devices]
            held: list[str] = []
            out: list[object] = []
            for i, (op, arg, flag) in enumerate(script):
                if op == "place":
                    request = pool[arg % len(pool)]
                    ctx = CycleContext(state, Job(f"j{i}", request, best_effort=flag), request)
                    placement = framework.select(ctx)
                    out.append(placement)
                    if cached:
                        assert_fresh(framework, ctx)
                    if placement is not None:
                        state.allocate(f"j{i}", placement)
                        held.append(f"j{i}")
                elif op == "release" and held:
                    state.release(held.pop(arg % len(held)))
                elif op == "health":
                    device = devices[arg % len(devices)]
                    keys = state.set_device_health(
                        device, Health.HEALTHY if flag else Health.UNHEALTHY
                    )
                    for key in keys:
                        state.release(key)
                        held.remove(key)
                elif op == "remove" and state.active[arg]:
                    # its tasks stay held: released by later steps, on an inactive row
                    state.remove_node(state.nodes[arg].name)
            runs.append(out)
        assert runs[0] == runs[1]

    check()


def test_a_class_is_refreshed_only_where_rows_changed() -> None:
    state = ClusterState([gpu_node(f"g{i}", gpus=2) for i in range(100)])
    framework = Framework(parse_profile({}))
    request = TaskRequest(1000, 1024, (DeviceRequest.of("gpu", 1),))
    ctx = CycleContext(state, Job("a", request), request)
    calls: list[int] = []
    fit = framework.filters[0]
    original = fit.filter_rows  # type: ignore[attr-defined]

    def counting(ctx: CycleContext, rows: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
        calls.append(len(rows))
        return original(ctx, rows)  # type: ignore[no-any-return]

    fit.filter_rows = counting  # type: ignore[attr-defined]
    first = framework.select(ctx)
    assert first is not None
    state.allocate("a", first)
    second = framework.select(ctx)
    assert second is not None and calls == [1]  # only the row "a" took
    state.allocate("b", second)
    framework.select(ctx)
    assert calls == [1, 1]


def test_a_row_taken_out_stays_out_when_its_tasks_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """A removed node's row changes again when its tasks are released: the refresh of a
    class, row by row, must still leave it out (best fit would pick it)."""
    monkeypatch.setattr(runtime, "_REFRESH_WHOLE", 1.0)
    state = ClusterState([cpu_node("big", cpu=64_000), cpu_node("small", cpu=8_000)])
    framework = Framework(parse_profile({"score": ["bestfit"]}))
    request = TaskRequest(4000, 1024)
    ctx = CycleContext(state, Job("a", request), request)
    state.allocate("held", Placement("small", 4000, 1024))
    assert framework.select(ctx) == Placement("small", 4000, 1024)  # best fit: the fuller
    state.remove_node("small")
    assert framework.select(ctx) == Placement("big", 4000, 1024)
    state.release("held")  # the inactive row gains room
    assert framework.select(ctx) == Placement("big", 4000, 1024)
    assert_fresh(framework, ctx)
