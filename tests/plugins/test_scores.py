"""Literal cases for the score plugins: which node each one prefers, and why."""

import numpy as np
import pytest

from builders import cpu_node, gpu_node
from hetsched.cluster import ClusterState, DeviceShare, Placement
from hetsched.framework import CycleContext
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.plugins.allocated import MostAllocated, Spread
from hetsched.plugins.bestfit import BestFit, BestFitArgs
from hetsched.plugins.dotprod import DotProd, DotProdArgs
from hetsched.plugins.firstfit import FirstFit
from hetsched.plugins.fit import Fit


def cluster() -> ClusterState:
    state = ClusterState(
        [
            gpu_node("busy", gpus=8, cpu=64_000, memory=256 * 1024),
            gpu_node("idle", gpus=8, cpu=64_000, memory=256 * 1024),
            cpu_node("cpu", cpu=64_000, memory=256 * 1024),
        ]
    )
    devices = [d.id for d in state.nodes[0].devices[:6]]
    state.allocate(
        "x", Placement("busy", 48_000, 128 * 1024, tuple(DeviceShare(d, 1000) for d in devices))
    )
    return state


def best(plugin: object, state: ClusterState, request: TaskRequest) -> str:
    ctx = CycleContext(state, Job("j", request), request)
    rows = np.flatnonzero(Fit().filter(ctx, state.active))
    scores = plugin.score(ctx, rows)  # type: ignore[attr-defined]
    assert scores.shape == rows.shape
    return state.nodes[int(rows[int(np.argmax(scores))])].name


GPU_TASK = TaskRequest(4000, 8192, (DeviceRequest.of("gpu", 1),))
CPU_TASK = TaskRequest(4000, 8192)


@pytest.mark.parametrize(
    ("plugin", "gpu_choice", "cpu_choice"),
    [
        (FirstFit(), "busy", "busy"),
        (BestFit(BestFitArgs()), "busy", "busy"),  # packs onto the used node
        (MostAllocated(BestFitArgs()), "busy", "busy"),
        (Spread(BestFitArgs()), "idle", "idle"),  # idle and cpu tie; the first row wins
        (DotProd(DotProdArgs()), "idle", "idle"),  # most free along the request
        (DotProd(DotProdArgs(prefer="min")), "busy", "busy"),
    ],
    ids=["firstfit", "bestfit", "mostallocated", "spread", "dotprod-max", "dotprod-min"],
)
def test_preferred_node(plugin: object, gpu_choice: str, cpu_choice: str) -> None:
    state = cluster()
    assert best(plugin, state, GPU_TASK) == gpu_choice
    assert best(plugin, state, CPU_TASK) == cpu_choice


def test_bestfit_keeps_cpu_work_off_idle_gpus() -> None:
    state = cluster()
    state.release("x")  # now: two idle GPU nodes and a CPU node
    assert best(BestFit(BestFitArgs()), state, CPU_TASK) == "cpu"


def test_bestfit_weights_change_the_choice() -> None:
    state = cluster()
    cpu_only = BestFit(BestFitArgs.model_validate({"weights": {"memory": 0, "devices": 0}}))
    # on CPU alone, the busy node (16 cores left) is the best fit, idle GPUs do not count
    assert best(cpu_only, state, CPU_TASK) == "busy"


def test_scores_are_in_range() -> None:
    state = cluster()
    ctx = CycleContext(state, Job("j", GPU_TASK), GPU_TASK)
    rows = np.arange(2)
    for plugin in (
        BestFit(BestFitArgs()),
        Spread(BestFitArgs()),
        DotProd(DotProdArgs()),
        FirstFit(),
    ):
        scores = plugin.score(ctx, rows)
        assert ((scores >= 0) & (scores <= 100)).all(), (plugin.name, scores)
