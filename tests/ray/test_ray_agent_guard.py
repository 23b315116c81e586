"""The overcommit guard inside the node agent, without Ray: the local executor's guard
measures the node's tasks by their pids on the node, kills a best-effort task over its
request, leaves a guaranteed one alone, and the alert and the kill's reason reach the
control plane through the long poll."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil

from hetsched.agent.guard import Alert, Guard, Watched
from hetsched.cluster.placement import Placement
from hetsched.drivers.executor import Exit, Launch, Start
from hetsched.framework.profile import GuardSpec
from hetsched.keys import TaskKey
from hetsched.ray.agent import NodeAgent

#: allocates and touches 200 MiB, then waits
HOG = (
    sys.executable,
    "-c",
    "import time; b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096]); "
    "print('full', flush=True); time.sleep(60)",
)
CALM = ("sleep", "60")
SPEC = GuardSpec(interval_s=0.2, node_memory_threshold=1.0, kill_best_effort=True)


def _watched(key: TaskKey, memory_mib: int, best_effort: bool) -> dict[str, Any]:
    # the control plane's view: it knows no pid of a task on a Ray node
    row = Watched(str(key), key.job, key.task, key.run, "n", 0, memory_mib, 100, best_effort)
    return asdict(row)


async def _until_full(agent: NodeAgent, key: TaskKey) -> None:
    out = b""
    deadline = time.monotonic() + 30
    while b"full" not in out:
        assert time.monotonic() < deadline, out
        reply = await agent.sync({str(key): (len(out), 0, True)}, [], 0.5, 1 << 20)
        out += reply["out"].get(str(key), (b"", b""))[0]


async def _guarded(tmp_path: Path) -> dict[str, Any]:
    agent = NodeAgent("t", "node-id", str(tmp_path / "node"), 0.5)
    hog, calm = TaskKey("hog", 0, 1), TaskKey("calm", 0, 1)
    agent.start(
        [
            Start(hog, Placement("n", 100, 64), launch=Launch(HOG, {})),
            Start(calm, Placement("n", 100, 64), launch=Launch(CALM, {})),
        ]
    )
    await _until_full(agent, hog)
    rows = [_watched(hog, 64, True), _watched(calm, 64, False)]
    agent.guard(SPEC.model_dump(), rows)
    # a second round: the alert is raised once, not at every round
    agent.guard(SPEC.model_dump(), rows)
    alerts: list[dict[str, Any]] = []
    exits: list[Exit] = []
    deadline = time.monotonic() + 30
    while not exits:
        assert time.monotonic() < deadline, alerts
        reply = await agent.sync({str(hog): (1 << 30, 1 << 30, True)}, [], 0.5, 1 << 20)
        alerts += reply["alerts"]
        exits += reply["exits"]
    calm_pid = agent.executor.handles[str(calm)].pid
    calm_alive = psutil.pid_exists(calm_pid)
    agent.kill([str(calm)])
    await agent.close()
    return {"alerts": alerts, "exits": exits, "calm_alive": calm_alive}


def test_the_agent_guards_its_nodes_tasks_and_says_why_it_killed(tmp_path: Path) -> None:
    out = asyncio.run(_guarded(tmp_path))
    (alert,) = [Alert(**a) for a in out["alerts"]]
    assert (alert.kind, alert.job_id, alert.task, alert.run) == ("task_memory", "hog", 0, 1)
    assert alert.killed == "hog/0#1" and alert.node == "n"
    assert alert.limit == 64 and alert.measured > 150
    (exit_,) = out["exits"]
    assert str(exit_.key) == "hog/0#1" and exit_.code == -9  # SIGKILL
    assert exit_.reason == f"killed by the overcommit guard: {alert.message}"
    # the guaranteed task is not killed
    assert out["calm_alive"]


def test_the_control_planes_guard_publishes_the_nodes_alerts() -> None:
    guard = Guard(SPEC, "ray")
    alert = Alert(1.0, "task_memory", "a100-0", "task 0 of j over", 300.0, 64.0, "j", 0, 1, "j/0#1")
    guard.take([alert, Alert(2.0, "node_memory", "t4-0", "node t4-0: memory", 0.97, 0.95)])
    assert guard.recent() == [
        alert,
        Alert(2.0, "node_memory", "t4-0", "node t4-0: memory", 0.97, 0.95),
    ]
    assert guard.counts == {"task_memory": 1, "node_memory": 1}
    assert guard.kills == 1
