"""Determinism across drivers: the same happenings, fed to the core through the simulator
and through the service's turn planner (a fake launcher, an in-memory store), give the same
actions at the same times.

The simulator replays a random scenario (arrivals, durations, cancellations, a node lost and
back) and records every call to the core. The service path runs real ControlLoop turns: the
submissions and cancellations come in through its API methods, node changes through its
device-event inbox, and task exits from a launcher that ends each task after its duration
(or its grace, once stopped), as the simulator's clock does. The driver of the test calls a
turn at each time something is due, as the simulator's event loop does.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import gpu_node
from hetsched.cluster.state import ClusterState
from hetsched.controlplane import ControlLoop, ProcessRunner
from hetsched.controlplane.schemas import SubmitSpec
from hetsched.drivers import Exit, Start, Stop
from hetsched.framework.profile import ProfileSpec, parse_profile
from hetsched.model.device import Node
from hetsched.model.job import Job
from hetsched.scheduler import Action, Event, NodeAdded, NodeRemoved, Scheduler
from hetsched.sim.engine import ClusterChange, EngineConfig, Simulator
from hetsched.sim.workload import Workload, WorkloadJob

NODES = [gpu_node("n0", gpus=2, cpu=16_000), gpu_node("n1", gpus=4, cpu=16_000)]
PROFILES = {
    "fifo": {},
    "priority-preemption": {
        "queue_sort": "priority",
        "post_filter": [{"name": "preemption", "args": {"grace_s": 5}}],
    },
}


@dataclass(frozen=True)
class Scenario:
    jobs: tuple[tuple[SubmitSpec, str, float, float], ...]  # spec, id, submit, duration
    cancels: tuple[tuple[float, str], ...]
    changes: tuple[ClusterChange, ...]
    profile: ProfileSpec


def _spec(name: str, gpus: int, replicas: int, priority: int, elastic: bool = False) -> SubmitSpec:
    """A job; ``elastic``: it runs with 1 to ``replicas`` tasks (grows and shrinks)."""
    resources: dict[str, Any] = {"cpu": "1", "memory": "1Gi"}
    if gpus:
        resources["devices"] = [{"class": "gpu", "count": gpus}]
    body: dict[str, Any] = {
        "name": name,
        "command": ["true"],
        "priority": priority,
        "replicas": replicas,
        "resources": resources,
    }
    if elastic:
        body["min_replicas"] = 1
    return SubmitSpec.model_validate(body)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    rows = draw(
        st.lists(
            st.tuples(
                st.integers(0, 40),  # submit
                st.integers(1, 30),  # duration
                st.integers(0, 2),  # gpus per task
                st.integers(1, 3),  # replicas
                st.integers(0, 3),  # priority
                st.booleans(),  # elastic
            ),
            min_size=1,
            max_size=10,
        )
    )
    jobs = tuple(
        (_spec(f"j{i}", g, r, p, e), f"j{i}", float(s), float(d))
        for i, (s, d, g, r, p, e) in enumerate(rows)
    )
    cancel_at = draw(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 9)), max_size=2))
    cancels = tuple((float(t), f"j{i % len(jobs)}") for t, i in cancel_at)
    changes: tuple[ClusterChange, ...] = ()
    if draw(st.booleans()):
        lost = draw(st.integers(5, 50))
        changes = (
            ClusterChange(float(lost), NodeRemoved("n0")),
            ClusterChange(float(lost + 10), NodeAdded(gpu_node("n0b", gpus=2, cpu=16_000))),
        )
    profile = parse_profile(PROFILES[draw(st.sampled_from(sorted(PROFILES)))])
    return Scenario(jobs, cancels, changes, profile)


def _job(spec: SubmitSpec, job_id: str, submit: float) -> Job:
    return spec.to_job(job_id, "alice", submit)


# -- the simulator's side --------------------------------------------------------------------


def through_the_simulator(scenario: Scenario) -> list[tuple[float, list[Action]]]:
    calls: list[tuple[float, list[Action]]] = []

    class Recording(Scheduler):
        def handle(self, events: Iterable[Event], now: float) -> list[Action]:
            actions = super().handle(events, now)
            calls.append((now, actions))
            return actions

    workload = Workload(
        tuple(
            WorkloadJob(_job(spec, job_id, submit), duration)
            for spec, job_id, submit, duration in scenario.jobs
        )
    )
    Simulator(
        NODES,
        workload,
        scenario.profile,
        config=EngineConfig(tick_s=0, idle_ticks=1),
        changes=scenario.changes,
        cancellations=scenario.cancels,
        core=lambda state, profile, seed: Recording(state, profile, seed),
    ).run()
    return calls


# -- the service's side ----------------------------------------------------------------------


class MemoryStore:
    """What the loop writes, kept in memory."""

    def __init__(self) -> None:
        self.plans: list[Any] = []

    def record_turn(
        self, exits: Sequence[Exit], plan: Any, starts_die_with_host: bool = False
    ) -> None:
        self.plans.append((list(exits), plan))

    def record_launched(self, launched: Sequence[Any], durable: bool = True) -> None:
        pass

    def record_alerts(self, alerts: Sequence[Any]) -> None:
        pass

    def record_node_changes(self, joined: Sequence[Any], left: Sequence[str], now: float) -> None:
        pass


@dataclass
class FakeLauncher:
    """Tasks end after their job's duration, or after their grace once stopped."""

    durations: dict[str, float]
    jobs: dict[str, Any] = field(default_factory=dict)
    guard: Any = None
    checkpoints: Any = None  # no checkpoint protocol: no reports, no notices
    devices: dict[str, Any] = field(default_factory=dict)
    _due: list[tuple[float, int, Exit]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _killed: set[tuple[str, int, int]] = field(default_factory=set)
    now: float = 0.0

    def know(self, job: Job, spec: SubmitSpec) -> None:
        self.jobs[job.id] = (job, spec)

    def forget(self, job_id: str) -> None:
        self.jobs.pop(job_id, None)

    def device_event(self, event: Event) -> Event:
        return event

    def launch(self, starts: Sequence[Start]) -> tuple[list[Any], list[Exit]]:
        for start in starts:
            key = start.key
            done = Exit.of(key.job, key.task, key.run, 0, False, "")
            self._push(self.now + self.durations[key.job], done)
        return [], []

    def signal(self, stops: Sequence[Stop], now: float) -> list[Exit]:
        for stop in stops:
            key = stop.key
            self._killed.add((key.job, key.task, key.run))
            self._push(now + stop.grace_s, Exit.of(key.job, key.task, key.run, None, True, ""))
        return []

    def resized(self, resized: Sequence[tuple[str, int, int, str]], now: float) -> None:
        pass  # the resize file changes no decision

    def poll(self, now: float) -> list[Exit]:
        out: list[Exit] = []
        while self._due and self._due[0][0] <= now:
            _, _, exit_ = heapq.heappop(self._due)
            key = (exit_.job_id, exit_.task, exit_.run)
            if not exit_.stopped and key in self._killed:
                continue  # stopped before it could finish: that process is gone
            out.append(exit_)
        return out

    def guard_round(self, now: float, running: Any) -> list[Any]:
        return []

    def next_due(self) -> float | None:
        return self._due[0][0] if self._due else None

    def _push(self, at: float, exit_: Exit) -> None:
        heapq.heappush(self._due, (at, next(self._seq), exit_))


class _Executor:
    kill_grace_s = 0.0


def through_the_service(
    scenario: Scenario, nodes: Sequence[Node] = NODES, launcher: FakeLauncher | None = None
) -> list[tuple[float, list[Action]]]:
    """The scenario through real ControlLoop turns; ``launcher`` ends the tasks (default:
    each after its job's duration)."""
    core = Scheduler(ClusterState(list(nodes)), scenario.profile, 0)
    runner = ProcessRunner(_Executor(), list(nodes))  # type: ignore[arg-type]
    loop = ControlLoop(MemoryStore(), core, runner)  # type: ignore[arg-type]
    if launcher is None:
        launcher = FakeLauncher({job_id: d for _, job_id, _, d in scenario.jobs})
    runner.launcher = launcher  # type: ignore[assignment]
    happenings: list[tuple[float, int, str, Any]] = []
    for seq, (spec, job_id, submit, _) in enumerate(scenario.jobs):
        row = {"id": job_id, "owner": "alice", "submitted_at": submit, "spec": {}}
        happenings.append((submit, seq, "submit", (row, spec)))
    for seq, (at, job_id) in enumerate(scenario.cancels):
        happenings.append((at, seq, "cancel", job_id))
    for seq, change in enumerate(scenario.changes):
        happenings.append((change.time, seq, "change", change.event))
    happenings.sort(key=lambda h: (h[0], h[1]))
    turns: list[tuple[float, list[Action]]] = []
    wakeups: set[float] = set()
    while True:
        due = [t for t in (launcher.next_due(), *wakeups) if t is not None]
        if happenings:
            due.append(happenings[0][0])
        if not due:
            return turns
        now = min(due)
        woken = now in wakeups
        wakeups.discard(now)
        while happenings and happenings[0][0] == now:
            _, _, kind, payload = happenings.pop(0)
            if kind == "submit":
                loop.submitted(*payload)
            elif kind == "cancel":
                loop.cancelled(payload, "the workload")
            else:
                loop.device_events([payload])
        launcher.now = now
        # as the simulator: the core is called when something happened, or when it asked
        # to be woken (a turn with nothing to report and no tick due leaves it alone)
        loop.tick_s = 0.0 if woken else float("inf")
        turns.append((now, loop.turn(now)))
        wake = core.next_wakeup()
        if wake is not None and wake > now:
            wakeups.add(wake)


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_the_simulator_and_the_service_take_the_same_decisions(scenario: Scenario) -> None:
    simulated = [(t, a) for t, a in through_the_simulator(scenario) if a]
    served = [(t, a) for t, a in through_the_service(scenario) if a]
    assert served == simulated
    assert simulated  # every scenario submits at least one job


def test_a_literal_scenario_with_a_preemption_and_a_lost_node() -> None:
    """One scenario spelled out, so a failure of the property has a readable cousin."""
    scenario = Scenario(
        (
            (_spec("low", 2, 2, 0), "low", 0.0, 50.0),
            (_spec("high", 2, 1, 3), "high", 10.0, 20.0),
            (_spec("small", 1, 1, 1), "small", 12.0, 5.0),
        ),
        ((40.0, "small"),),
        (
            ClusterChange(20.0, NodeRemoved("n0")),
            ClusterChange(30.0, NodeAdded(gpu_node("n0b", gpus=2, cpu=16_000))),
        ),
        parse_profile(PROFILES["priority-preemption"]),
    )
    simulated = [(t, a) for t, a in through_the_simulator(scenario) if a]
    assert [type(a).__name__ for _, actions in simulated for a in actions].count("Bind") >= 3
    assert [(t, a) for t, a in through_the_service(scenario) if a] == simulated
