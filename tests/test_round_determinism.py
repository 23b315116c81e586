"""Round mode is a mode of the one core, so every driver runs it unchanged: the same
happenings through the simulator and through the service's turn planner give the same
actions at the same times (as ``test_determinism`` checks without rounds).

Jobs here run on work: each has a rate per device model and checkpoints continuously, so a
stopped run keeps all it did and a task's end depends on where it ran. The service side's
launcher does the same arithmetic as the simulator (work left / rate of the model it runs
on; a stop keeps the work done until the stop).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import gpu_node
from hetsched.controlplane.schemas import SubmitSpec
from hetsched.drivers import Exit, Start, Stop
from hetsched.framework.profile import parse_profile
from hetsched.scheduler import Action, Bind, Migrate, Preempt, Scheduler
from hetsched.sim.engine import EngineConfig, Simulator
from hetsched.sim.workload import Workload, WorkloadJob
from test_determinism import FakeLauncher, Scenario, through_the_service

NODES = [gpu_node("a", 2, "A100"), gpu_node("v", 2, "V100")]
RATES = {"A100": 3.0, "V100": 1.0}


def _spec(name: str, gpus: int, work: int, a100: float) -> SubmitSpec:
    return SubmitSpec.model_validate(
        {
            "name": name,
            "command": ["true"],
            "resources": {
                "cpu": "1",
                "memory": "1Gi",
                "devices": [{"class": "gpu", "count": gpus}],
            },
            "speed": {"A100": a100, "V100": 1.0},
            "work": work,
            "checkpoint": {"interval_s": 0, "notice_s": 5},
        }
    )


@dataclass
class WorkLauncher(FakeLauncher):
    """Tasks end when their work is done at the rate of the model they run on; a stop keeps
    the work done until then (continuous checkpoints)."""

    rates: dict[str, dict[str, float]] = field(default_factory=dict)
    left: dict[str, float] = field(default_factory=dict)
    running: dict[tuple[str, int], tuple[float, float]] = field(default_factory=dict)

    def launch(self, starts: Sequence[Start]) -> tuple[list[Any], list[Exit]]:
        for start in starts:
            key = start.key
            model = self.devices_model(start)
            rate = self.rates[key.job][model]
            self.running[(key.job, key.run)] = (self.now, rate)
            done = Exit.of(key.job, key.task, key.run, 0, False, "")
            self._push(self.now + self.left[key.job] / rate, done)
        return [], []

    def devices_model(self, start: Start) -> str:
        return "A100" if start.placement.node == "a" else "V100"

    def signal(self, stops: Sequence[Stop], now: float) -> list[Exit]:
        for stop in stops:
            run = self.running.pop((stop.key.job, stop.key.run), None)
            if run is not None:
                began, rate = run
                self.left[stop.key.job] -= (now - began) * rate
        return super().signal(stops, now)


@dataclass(frozen=True)
class Jobs:
    rows: tuple[tuple[str, int, float, int, float], ...]  # id, gpus, submit, work, a100 rate
    policy: str


@st.composite
def workloads(draw: st.DrawFn) -> Jobs:
    rows = draw(
        st.lists(
            st.tuples(
                st.integers(1, 2),
                st.integers(0, 900),
                st.integers(200, 2000),
                st.sampled_from([1.0, 2.0, 3.0]),
            ),
            min_size=1,
            max_size=7,
        )
    )
    policy = draw(st.sampled_from(["las", "agnostic-las", "max-throughput", "fifo"]))
    return Jobs(tuple((f"j{i}", g, float(s), w, a) for i, (g, s, w, a) in enumerate(rows)), policy)


def _profile(policy: str) -> dict[str, Any]:
    return {"rounds": {"policy": policy, "round_s": 120, "grace_s": 5}}


def _same_words(calls: list[tuple[float, list[Action]]]) -> list[tuple[float, list[Action]]]:
    """The calls that acted, with each Bind's checkpoint as every driver knows it: the
    simulator also knows the work it holds (``progress``), which the service learns only
    from the task; the decisions compared here do not read it."""
    out = []
    for now, actions in calls:
        if actions:
            out.append((now, [_plain(a) for a in actions]))
    return out


def _plain(action: Action) -> Action:
    if isinstance(action, Bind) and action.resume is not None:
        return dataclasses.replace(action, resume=dataclasses.replace(action.resume, progress=None))
    return action


def through_the_simulator(jobs: Jobs) -> list[tuple[float, list[Action]]]:
    calls: list[tuple[float, list[Action]]] = []

    class Recording(Scheduler):
        def handle(self, events: Any, now: float) -> list[Action]:
            actions = super().handle(events, now)
            calls.append((now, actions))
            return actions

    workload = Workload(
        tuple(
            WorkloadJob(_spec(i, g, w, a).to_job(i, "alice", s), float(w))
            for i, g, s, w, a in jobs.rows
        )
    )
    Simulator(
        NODES,
        workload,
        parse_profile(_profile(jobs.policy)),
        config=EngineConfig(tick_s=0, idle_ticks=1),
        core=lambda state, profile, seed: Recording(state, profile, seed),
    ).run()
    return calls


def through_the_planner(jobs: Jobs) -> list[tuple[float, list[Action]]]:
    scenario = Scenario(
        tuple((_spec(i, g, w, a), i, s, 0.0) for i, g, s, w, a in jobs.rows),
        (),
        (),
        parse_profile(_profile(jobs.policy)),
    )
    launcher = WorkLauncher(
        {},
        rates={i: {"A100": a, "V100": 1.0} for i, _, _, _, a in jobs.rows},
        left={i: float(w) for i, _, _, w, _ in jobs.rows},
    )
    return through_the_service(scenario, NODES, launcher)


@settings(max_examples=30, deadline=None)
@given(workloads())
def test_round_mode_takes_the_same_decisions_in_the_simulator_and_the_service(
    jobs: Jobs,
) -> None:
    simulated = _same_words(through_the_simulator(jobs))
    assert _same_words(through_the_planner(jobs)) == simulated
    assert simulated


def test_a_literal_round_scenario_rotates_and_moves_jobs_the_same_way() -> None:
    jobs = Jobs(
        (
            ("j0", 2, 0.0, 3000, 3.0),
            ("j1", 2, 0.0, 3000, 2.0),
            ("j2", 2, 10.0, 1500, 3.0),
        ),
        "las",
    )
    simulated = _same_words(through_the_simulator(jobs))
    kinds = [type(a) for _, actions in simulated for a in actions]
    assert Preempt in kinds and kinds.count(Bind) > 3
    assert Migrate in kinds or kinds.count(Preempt) > 1
    assert _same_words(through_the_planner(jobs)) == simulated
