"""Literal cases for the fragmentation study's policies: which node each one prefers, why."""

from __future__ import annotations

import numpy as np
import pytest

from builders import gpu_node
from hetsched.cluster import ClusterState, DeviceShare, Placement
from hetsched.cluster.frag import TargetClass
from hetsched.framework import CycleContext
from hetsched.framework.runtime import Framework
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.plugins.bestfit import BestFit, BestFitScoreArgs
from hetsched.plugins.dotprod import DotProd, DotProdArgs
from hetsched.plugins.fgd import FGD, FGDArgs
from hetsched.plugins.fit import Fit
from hetsched.plugins.gpuclustering import GpuClustering, GpuClusteringArgs
from hetsched.plugins.gpupacking import GpuPacking, GpuPackingArgs
from hetsched.plugins.randomfit import RandomFit, RandomFitArgs
from hetsched.sim.experiments.openb import ALL_POLICIES, policy_profile

NODES = ("shared", "whole6", "idle8", "idle2")
SHARE = TaskRequest(1000, 1024, (DeviceRequest.of("gpu", 1, 400),))
WHOLE = TaskRequest(1000, 1024, (DeviceRequest.of("gpu", 1),))
CPU_ONLY = TaskRequest(1000, 1024)


def cluster() -> ClusterState:
    """shared: 8 GPUs, one share task holds 500 of GPU 0; whole6: 8 GPUs, six 1-GPU tasks;
    idle8 and idle2: idle nodes with 8 and 2 GPUs. Every node has 64 CPUs."""
    state = ClusterState(
        [
            gpu_node("shared", gpus=8),
            gpu_node("whole6", gpus=8),
            gpu_node("idle8", gpus=8),
            gpu_node("idle2", gpus=2),
        ]
    )
    state.allocate("s", Placement("shared", 1000, 0, (DeviceShare("shared/gpu0", 500),)))
    for i in range(6):
        state.allocate(
            f"w{i}", Placement("whole6", 1000, 0, (DeviceShare(f"whole6/gpu{i}", 1000),))
        )
    return state


def scores(plugin: object, request: TaskRequest, state: ClusterState | None = None) -> dict:
    state = state or cluster()
    ctx = CycleContext(state, Job("j", request), request)
    rows = np.flatnonzero(Fit().filter(ctx, state.active))
    values = plugin.score(ctx, rows)  # type: ignore[attr-defined]
    return {state.nodes[int(r)].name: float(v) for r, v in zip(rows, values, strict=True)}


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        # shared: best-fit GPU has 500 free -> 100 - 50 // 10; whole6: needs a free GPU on a
        # used node -> 50 - 1; idle nodes: max(33 - GPUs, GPUs)
        (SHARE, {"shared": 95, "whole6": 49, "idle8": 25, "idle2": 31}),
        (WHOLE, {"shared": 49, "whole6": 49, "idle8": 25, "idle2": 31}),
        (CPU_ONLY, {"shared": 0, "whole6": 0, "idle8": 0, "idle2": 0}),
    ],
    ids=["share", "whole", "cpu-only"],
)
def test_gpupacking_tiers(request_: TaskRequest, expected: dict[str, int]) -> None:
    assert scores(GpuPacking(GpuPackingArgs()), request_) == expected


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        # fill = 25 * (8000 - free) // 8000: shared 1, whole6 18, idle8 0, idle2 18
        (SHARE, {"shared": 75 + 1, "whole6": 0 + 18, "idle8": 25 + 0, "idle2": 25 + 18}),
        (WHOLE, {"shared": 0 + 1, "whole6": 75 + 18, "idle8": 25 + 0, "idle2": 25 + 18}),
        (CPU_ONLY, {"shared": 0, "whole6": 0, "idle8": 0, "idle2": 0}),
    ],
    ids=["share", "whole", "cpu-only"],
)
def test_gpuclustering_tiers(request_: TaskRequest, expected: dict[str, int]) -> None:
    assert scores(GpuClustering(GpuClusteringArgs()), request_) == expected


def test_gpuclustering_mixed_labels_and_release() -> None:
    plugin = GpuClustering(GpuClusteringArgs())
    state = cluster()
    assert scores(plugin, SHARE, state)["whole6"] == 18
    # a share task joins whole6: its labels are now mixed and include "share" -> 50 + fill
    state.allocate("s2", Placement("whole6", 1000, 0, (DeviceShare("whole6/gpu6", 400),)))
    assert scores(plugin, SHARE, state)["whole6"] == 50 + 25 * (8000 - 1600) // 8000
    # after every 1-GPU task leaves, only the share label remains -> 75 + fill
    for i in range(6):
        state.release(f"w{i}")
    assert scores(plugin, SHARE, state)["whole6"] == 75 + 25 * (8000 - 7600) // 8000


def test_bestfit_reference_formula() -> None:
    # 100 * (1 - [0.5 * (cpu_free - cpu) / 64000 + 0.5 * (gpu_free - gpu) / 8000]), truncated;
    # here the largest node has 64 CPUs and 8 GPUs
    plugin = BestFit(BestFitScoreArgs(weights={"memory": 0}, truncate=True))
    got = scores(plugin, SHARE)

    def expect(cpu_free: int, gpu_free: int) -> int:
        return int(100 * (1 - (0.5 * (cpu_free - 1000) / 64000 + 0.5 * (gpu_free - 400) / 8000)))

    assert got == {
        "shared": expect(63_000, 7_500),
        "whole6": expect(58_000, 2_000),
        "idle8": expect(64_000, 8_000),
        "idle2": expect(64_000, 2_000),
    }
    assert max(got, key=got.__getitem__) == "whole6"


def test_dotprod_reference_formula() -> None:
    # 100 * (1 - (f . r) / 2) with f, r normalised by the largest node, truncated
    plugin = DotProd(DotProdArgs(prefer="min", weights={"memory": 0}, truncate=True))
    got = scores(plugin, WHOLE)

    def expect(cpu_free: int, gpu_free: int) -> int:
        dot = (cpu_free / 64000) * (1000 / 64000) + (gpu_free / 8000) * (1000 / 8000)
        return int(100 * (1 - dot / 2))

    assert got == {
        "shared": expect(63_000, 7_500),
        "whole6": expect(58_000, 2_000),
        "idle8": expect(64_000, 8_000),
        "idle2": expect(64_000, 2_000),
    }


def test_truncate_defaults_off() -> None:
    plain = scores(BestFit(BestFitScoreArgs()), SHARE)
    assert any(v != int(v) for v in plain.values())


def test_random_is_seeded_and_uniform() -> None:
    a = scores(RandomFit(RandomFitArgs(seed=7)), SHARE)
    b = scores(RandomFit(RandomFitArgs(seed=7)), SHARE)
    c = scores(RandomFit(RandomFitArgs(seed=8)), SHARE)
    assert a == b != c
    # over many attempts every feasible node wins about equally often
    plugin = RandomFit(RandomFitArgs(seed=1))
    wins = {name: 0 for name in NODES}
    for _ in range(4000):
        got = scores(plugin, SHARE)
        wins[max(got, key=got.__getitem__)] += 1
    assert all(800 < count < 1200 for count in wins.values()), wins


def test_random_shared_gpu_choice() -> None:
    plugin = RandomFit(RandomFitArgs(seed=3))
    state = cluster()
    ctx = CycleContext(state, Job("j", SHARE), SHARE)
    chosen = {plugin.choose_devices(ctx, state.row("whole6"))[0].device_id for _ in range(200)}
    assert chosen == {"whole6/gpu6", "whole6/gpu7"}  # the only GPUs with room, both used


# FGD against the target workload {share 500: 1, one whole GPU: 1}, by hand. Before:
#   shared (GPU0 500 free): share-500 F 0, whole F 500 -> 250
#   whole6 (2 free): 0 -> 0; idle8: 0; idle2: 0
# share-400 task after: shared on GPU0 -> [100, 1000 x7]: F(share) 100, F(whole) 100 -> 100,
#   delta -150; on a free GPU of shared -> [500, 600, ...]: F(share) 0, whole 1100 -> delta +300;
#   whole6 -> [600, 1000]: F(share) 0, whole 600 -> delta +300; idle8, idle2: same, +300.
FGD_TARGET = [TargetClass(0, 1, 500, None, 1), TargetClass(0, 1, 1000, None, 1)]


def fgd_plugin(score: str = "smooth") -> FGD:
    return FGD(
        FGDArgs(
            target=[
                {"cpu_milli": c.cpu_milli, "count": c.count, "share": c.share} for c in FGD_TARGET
            ],
            score=score,
        )
    )


def test_fgd_gradient_and_gpu_choice() -> None:
    plugin = fgd_plugin()
    state = cluster()
    ctx = CycleContext(state, Job("j", SHARE), SHARE)
    rows = np.arange(4)
    assert plugin.delta(ctx, rows).tolist() == [-150.0, 300.0, 300.0, 300.0]
    got = scores(plugin, SHARE, state)
    assert max(got, key=got.__getitem__) == "shared"
    assert plugin.choose_devices(ctx, state.row("shared")) == (DeviceShare("shared/gpu0", 400),)


def test_fgd_cache_follows_allocations() -> None:
    plugin = fgd_plugin()
    state = cluster()
    ctx = CycleContext(state, Job("j", SHARE), SHARE)
    rows = np.arange(4)
    plugin.delta(ctx, rows)
    # fill shared's GPU 0: now a 400 share on shared goes to a free GPU of an 8-GPU node
    # with one full GPU: before F = 0; after [0, 600, 1000 x6]: whole 600 -> +300
    state.allocate("s3", Placement("shared", 0, 0, (DeviceShare("shared/gpu0", 500),)))
    assert plugin.delta(ctx, rows).tolist() == [300.0, 300.0, 300.0, 300.0]
    state.release("s3")
    assert plugin.delta(ctx, rows).tolist() == [-150.0, 300.0, 300.0, 300.0]


def test_fgd_whole_and_cpu_only_tasks() -> None:
    plugin = fgd_plugin()
    state = cluster()
    # a whole GPU on shared -> [500, 0, 1000 x6]: share-500 F 0, whole 500 -> 250: delta 0;
    # on whole6 -> [1000]: 0 -> 0; on idle2 -> [1000]: 0; idle8: 0
    ctx = CycleContext(state, Job("j", WHOLE), WHOLE)
    assert plugin.delta(ctx, np.arange(4)).tolist() == [0.0, 0.0, 0.0, 0.0]
    # a task without GPUs changes only CPU; all target classes here need 0 CPU
    ctx = CycleContext(state, Job("k", CPU_ONLY), CPU_ONLY)
    assert plugin.delta(ctx, np.arange(4)).tolist() == [0.0, 0.0, 0.0, 0.0]


def test_fgd_truncated_score_matches_reference_shape() -> None:
    # trunc(100 * sigmoid(-delta / 1000)): delta -150 -> 53, +300 -> 42
    got = scores(fgd_plugin("truncated"), SHARE)
    assert got == {"shared": 53.0, "whole6": 42.0, "idle8": 42.0, "idle2": 42.0}


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_every_policy_places_through_the_framework(policy: str) -> None:
    framework = Framework(policy_profile(policy, 42, FGD_TARGET), seed=42)
    state = cluster()
    for i, request in enumerate([SHARE, WHOLE, CPU_ONLY, SHARE]):
        ctx = CycleContext(state, Job(f"j{i}", request), request)
        placement = framework.select(ctx)
        assert placement is not None
        state.allocate(f"j{i}", placement)
    assert len(state.allocations) == 7 + 4
