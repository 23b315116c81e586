"""The core's round mode against the round engine on a small Gavel workload: with stops
that take no time they realise the same schedule (the same mean JCT); with a notice and a
grace per stop the core's jobs take longer, by the time stops take."""

from __future__ import annotations

import pytest

from hetsched.sim.experiments.round_modes import compare_round_modes, one_device_nodes
from hetsched.sim.gavel import BUNDLED_THROUGHPUTS, load_throughputs
from hetsched.sim.gavel_synth import GavelWorkloadSpec, generate_gavel
from hetsched.sim.workload import Workload


def _workload() -> Workload:
    spec = GavelWorkloadSpec(jobs=30, rate_per_h=1.5, seed=0, gpus_per_node=1)
    return generate_gavel(spec, load_throughputs(BUNDLED_THROUGHPUTS))


NODES = one_device_nodes({"v100": 3, "p100": 3, "k80": 3})


@pytest.mark.parametrize("policy", ["las", "agnostic-las", "max-throughput"])
def test_instant_stops_give_the_round_engines_schedule(policy: str) -> None:
    result = compare_round_modes(NODES, _workload(), policy)
    assert result.jobs == 30
    assert result.engine_jct_h > 1.0
    assert result.core_jct_h == pytest.approx(result.engine_jct_h, rel=1e-6)


def test_stops_that_take_time_make_jobs_take_longer() -> None:
    result = compare_round_modes(NODES, _workload(), "las", grace_s=30, notice_s=30)
    assert result.jobs == 30
    assert 0.0 < result.difference < 0.2
    assert result.core_preemptions + result.core_migrations > 0
