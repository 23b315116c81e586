"""The random scorer draws only on real placements: what-if trials never move its stream."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.framework import CycleContext, Framework, parse_profile
from hetsched.scheduler.placing import trial

PROFILE = parse_profile({"score": [{"name": "random", "args": {"seed": 7}}]})
NODES = [gpu_node(f"n{i}", gpus=4) for i in range(12)]


def choices(what_ifs: list[bool]) -> list[tuple[str, tuple[str, ...]]]:
    """Real placements of shared tasks, with a what-if trial before each where asked."""
    framework = Framework(PROFILE, seed=3)
    state = ClusterState(NODES)
    out = []
    for i, before in enumerate(what_ifs):
        spec = job(f"j{i}", gpus=1, share=250)
        if before:
            assert trial(framework, state.fork(), spec, 2, 0.0) is not None
        placement = framework.select(CycleContext(state, spec, spec.resources))
        assert placement is not None
        state.allocate(f"j{i}/0", placement)
        out.append((placement.node, tuple(d.device_id for d in placement.devices)))
    return out


@settings(max_examples=30, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=12))
def test_trials_in_between_change_no_real_choice(what_ifs: list[bool]) -> None:
    assert choices(what_ifs) == choices([False] * len(what_ifs))


def test_a_what_if_draw_repeats_and_a_real_one_moves_on() -> None:
    framework = Framework(PROFILE, seed=3)
    state = ClusterState(NODES)
    spec = job("j", gpus=1, share=250)
    trials = [trial(framework, state.fork(), spec, 1, 0.0) for _ in range(3)]
    assert trials[0] == trials[1] == trials[2]
    reals = [framework.select(CycleContext(state, spec, spec.resources)) for _ in range(6)]
    assert len({(p.node, p.devices) for p in reals if p is not None}) > 1
