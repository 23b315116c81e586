"""CPU-heavy variants of the openb pod list: the default list's GPU pods, then non-GPU pods
drawn from its own until they make the share the name asks for."""

from __future__ import annotations

from collections import Counter

import pytest

from builders import ROOT
from hetsched.sim.alibaba import TracePod
from hetsched.sim.experiments.openb import load_trace
from hetsched.sim.experiments.openb_variants import cpu_share_permille, cpu_variant

TRACES = ROOT.parent / "shared" / "traces" / "alibaba-gpu-v2023"


def _ask(p: TracePod) -> tuple[int, int, int, int, str]:
    return (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.gpu_spec)


def _pods(gpu: int, cpu: int) -> list[TracePod]:
    pods = [TracePod(f"g{i}", 1000, 1024, 1, 500) for i in range(gpu)]
    return pods + [TracePod(f"c{i}", 2000 + i, 2048, 0, 0) for i in range(cpu)]


@pytest.mark.parametrize(
    ("name", "share"), [("cpu400", 400), ("cpu050", 50), ("cpu999", 999), ("gpu400", None)]
)
def test_the_share_comes_from_the_name(name: str, share: int | None) -> None:
    assert cpu_share_permille(name) == share


@pytest.mark.parametrize("name", ["cpu000", "cpu40", "cpu4000", "default"])
def test_other_names_are_refused_with_what_is_expected(name: str) -> None:
    with pytest.raises(ValueError, match="cpuXYZ"):
        cpu_variant(name, _pods(6, 2))


def test_few_non_gpu_pods_are_the_first_ones_in_order() -> None:
    # 6 GPU pods; 25 % non-GPU means 2 of 8: the first two of the default's three
    pods = cpu_variant("cpu250", _pods(6, 3))
    assert [p.name for p in pods[:6]] == [f"g{i}" for i in range(6)]
    assert [p.cpu_milli for p in pods[6:]] == [2000, 2001]
    assert len(pods) == 8


def test_many_non_gpu_pods_take_each_once_then_draw_again() -> None:
    # 6 GPU pods; 60 % non-GPU means 9 of 15: the default's three, then six drawn from them
    pods = cpu_variant("cpu600", _pods(6, 3))
    non_gpu = pods[6:]
    assert len(non_gpu) == 9
    assert [p.cpu_milli for p in non_gpu[:3]] == [2000, 2001, 2002]
    assert {p.cpu_milli for p in non_gpu[3:]} <= {2000, 2001, 2002}
    assert len({p.name for p in pods}) == len(pods)  # every pod a name of its own


def test_a_variant_is_the_same_in_every_run() -> None:
    default = _pods(50, 7)
    assert cpu_variant("cpu400", default) == cpu_variant("cpu400", default)
    assert cpu_variant("cpu400", default) != cpu_variant("cpu410", default)[: len(default)]


@pytest.mark.skipif(not TRACES.is_dir(), reason="the openb trace is not in ../shared/traces")
def test_made_like_the_traces_own_cpu200() -> None:
    real = load_trace(TRACES, "cpu200").pods
    made = cpu_variant("cpu200", load_trace(TRACES, "default").pods)
    # the same GPU pods in the same order (the file numbers its pods afresh)
    assert [_ask(p) for p in made if p.num_gpu] == [_ask(p) for p in real if p.num_gpu]
    real_cpu, made_cpu = (sum(1 for p in ps if not p.num_gpu) for ps in (real, made))
    assert abs(made_cpu - real_cpu) <= 2  # 1,768 in the file, 1,766 made (rounding)
    # the drawn pods ask for what the default's non-GPU pods ask for, in about their mix
    shape = Counter((p.cpu_milli, p.memory_mib) for p in made if not p.num_gpu)
    assert shape.most_common(1)[0][0] in {(p.cpu_milli, p.memory_mib) for p in real}


@pytest.mark.skipif(not TRACES.is_dir(), reason="the openb trace is not in ../shared/traces")
def test_a_variant_the_trace_has_no_file_for_loads_by_its_name() -> None:
    trace = load_trace(TRACES, "cpu400")
    non_gpu = sum(1 for p in trace.pods if not p.num_gpu)
    assert round(1000 * non_gpu / len(trace.pods)) == 400
    assert not (TRACES / "openb_pod_list_cpu400.csv").exists()
