"""Bodies of the node agent tests on Ray; they run inside a namespace next to a local
cluster."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
from ray_bodies_executor import _close, _exit, _log, _pgid, _setup, _start, _wait

from hetsched.cluster.placement import Placement
from hetsched.drivers import Exit, Start
from hetsched.drivers.executor import Launch, Stop
from hetsched.keys import TaskKey
from hetsched.ray.executor import RayExecutor
from hetsched.ray.testing import ClusterInfo


def burst(cluster: ClusterInfo, jobs: int) -> dict[str, Any]:
    """``jobs`` trivial tasks over the three nodes in one turn: each exit reported once, and
    nothing left on the nodes once they are acknowledged."""
    _inventory, executor, nodes = _setup(cluster, "burst")
    names = ["a100-0", "t4-0", "cpu-0"]
    starts = [
        Start(
            TaskKey(f"b{i}", 0, 1),
            Placement(names[i % 3], 10, 16),
            launch=Launch(("true",), {}),
        )
        for i in range(jobs)
    ]
    wake = threading.Event()
    executor.on_exit = wake.set
    executor.start(starts, time.time())
    exits = _woken(executor, wake, jobs, 240)
    # then one more on each node, the cluster idle: it starts and ends as quickly
    for i, name in enumerate(names):
        executor.start(
            [
                Start(
                    TaskKey(f"after{i}", 0, 1),
                    Placement(name, 10, 16),
                    launch=Launch(("true",), {}),
                )
            ],
            time.time(),
        )
    exits += _woken(executor, wake, 3, 60)
    _close(executor)
    return {
        "codes": dict(Counter(e.exit_code for e in exits)),
        "repeated": sorted(k for k, n in Counter(str(e.key) for e in exits).items() if n > 1),
        "reported": len(exits),
        "node_files_left": _files_left(Path(cluster.scratch) / "nodes" / executor.namespace),
        "nodes": sorted(nodes),
    }


def agent_dies(cluster: ClusterInfo) -> dict[str, Any]:
    """The agent actor of a live node killed under running tasks: Ray recreates it, each task
    is adopted or reported lost, once, nothing of them is left running, and the node runs new
    tasks."""
    import ray

    _inventory, executor, nodes = _setup(cluster, "agent-dies")
    node = nodes["t4-0"]
    keys = [
        _start(executor, node, ["sh", "-c", "sleep 4; exit 3"], "short"),
        _start(executor, node, ["sleep", "60"], "long"),
    ]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(h.pid for h in executor.handles.values()):
        executor.poll()
        time.sleep(0.05)
    groups = {key: executor.handles[key].pid for key in keys}
    link = executor.links[executor.handles[keys[0]].node_id]
    before = ray.get(link.actor.ray_view.remote(), timeout=60)["worker_pid"]
    ray.kill(link.actor, no_restart=False)
    exits = _wait(executor, 1, 90)  # "long" is lost, or "short" ends first
    if len(exits) < 2:
        for key in keys:
            if key not in {str(e.key) for e in exits} and key in executor.handles:
                executor.stop_one(key, 0.5)
        exits += _wait(executor, 2 - len(exits), 90)
    after = _worker_pid(link.actor, 90)
    again = _start(executor, node, ["sh", "-c", "exit 0"], "again")
    exits += _wait(executor, 1, 60)
    extra = []
    for _ in range(10):
        extra += executor.poll()
        time.sleep(0.05)
    time.sleep(0.5)
    left = [p.pid for p in psutil.process_iter() if _pgid(p.pid) in groups.values()]
    _close(executor)
    return {
        "exits": sorted(_exit(e) for e in exits),
        "extra": [_exit(e) for e in extra],
        "recreated": before != after,
        "left": left,
        "again": again,
    }


def notice(cluster: ClusterInfo) -> dict[str, Any]:
    """A stop with a notice: the notice signal first (a task that saves and exits in it ends
    with its own status), SIGTERM when the notice is over (one that ignores it)."""
    _inventory, executor, nodes = _setup(cluster, "notice")
    node = nodes["cpu-0"]
    told = _start(
        executor, node, ["sh", "-c", "trap 'echo saved; exit 0' USR1; sleep 60 & wait"], "told"
    )
    deaf = _start(executor, node, ["sh", "-c", "trap '' USR1; sleep 60 & wait"], "deaf")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(h.pid for h in executor.handles.values()):
        executor.poll()
        time.sleep(0.05)
    for key in (told, deaf):  # until each shell runs its sleep (its trap is set)
        group = executor.handles[key].pid
        while len([p for p in psutil.process_iter() if _pgid(p.pid) == group]) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    now = time.time()
    executor.stop(
        [
            Stop(TaskKey.parse(told), Placement(node.name, 0, 0), 30.0, 1.0, "preempted"),
            Stop(TaskKey.parse(deaf), Placement(node.name, 0, 0), 1.0, 1.0, "preempted"),
        ],
        now,
    )
    in_notice = [executor.in_notice(TaskKey.parse(k)) for k in (told, deaf)]
    exits = _wait(executor, 2, 60)
    _close(executor)
    return {
        "in_notice": in_notice,
        "exits": sorted(_exit(e) for e in exits),
        "told_out": _log(executor, "told").splitlines()[-1],
    }


def _woken(
    executor: RayExecutor, wake: threading.Event, count: int, timeout_s: float
) -> list[Exit]:
    """Poll as the service's loop does: when woken (an agent answered) or when the executor
    says something is due, never on a timer of its own."""
    deadline = time.monotonic() + timeout_s
    exits: list[Exit] = []
    while len(exits) < count:
        assert time.monotonic() < deadline, f"{len(exits)} of {count} exits in {timeout_s} s"
        due = executor.next_due()
        wait = 5.0 if due is None else max(0.0, due - time.time())
        wake.wait(min(wait, deadline - time.monotonic()))
        wake.clear()
        exits += executor.poll()
    return exits


def _worker_pid(actor: Any, timeout_s: float) -> int:
    """The agent's worker pid once it answers (Ray may still be restarting it: asked again,
    bounded)."""
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return int(ray.get(actor.ray_view.remote(), timeout=30)["worker_pid"])
        except ray.exceptions.ActorUnavailableError:
            assert time.monotonic() < deadline, "the agent was not restarted"
            time.sleep(0.2)


def _files_left(folder: Path, timeout_s: float = 60) -> int:
    """The task files left under ``folder`` once the agents have had the acknowledgements
    (they come with their next long poll: waited for, bounded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        # os.walk: the agents remove files and folders meanwhile
        left = sum(len(files) for _root, _dirs, files in os.walk(folder))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)
