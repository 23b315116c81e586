"""The overcommit guard on real processes: measured memory against requests, alerts once per
condition, and kills asked only for best-effort tasks."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator

import psutil
import pytest

from hetsched.agent.guard import Guard, Watched, children_map, measure_tree
from hetsched.framework.profile import GuardSpec

# a shell (the session leader, like the executor's wrapper) whose child holds the memory
_HOG = (
    "{python} -c \"import sys, time; b = bytearray({mib} << 20); b[::4096] = b'x' * len(b[::4096]);"
    " print('ready', flush=True); time.sleep(120)\" & wait"
)


@pytest.fixture
def spawn() -> Iterator[Callable[[int], int]]:
    started: list[subprocess.Popen[bytes]] = []

    def run(mib: int) -> int:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", _HOG.format(python=sys.executable, mib=mib)],
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        started.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        return proc.pid

    yield run
    for proc in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def watched(key: str, pid: int, memory_mib: int, best_effort: bool) -> Watched:
    return Watched(key, key.split("/")[0], 0, 1, "local", pid, memory_mib, 1000, best_effort)


@pytest.mark.parametrize("one_table", [False, True])
def test_the_tree_is_measured(spawn: Callable[[int], int], one_table: bool) -> None:
    pid = spawn(150)
    tree = children_map() if one_table else None
    (child,) = tree[pid] if tree is not None else [p.pid for p in psutil.Process(pid).children()]
    rss, gpu, pids, _cpu = measure_tree(pid, {child: 5 << 20, 1: 1 << 30}, tree)
    assert pids == {pid, child}
    assert 150 <= rss < 400
    assert gpu == 5.0


@pytest.mark.parametrize(
    ("kill_policy", "killed"),
    [(True, ["hog/0#1"]), (False, [])],
)
def test_a_best_effort_hog_is_alerted_and_killed_by_policy(
    spawn: Callable[[int], int], kill_policy: bool, killed: list[str]
) -> None:
    hog = spawn(200)
    calm = spawn(8)
    greedy = spawn(200)
    guard = Guard(GuardSpec(kill_best_effort=kill_policy))
    tasks = [
        watched("hog/0#1", hog, 32, True),
        watched("calm/0#1", calm, 512, False),
        watched("greedy/0#1", greedy, 32, False),
    ]
    alerts = guard.check(tasks, now=10.0, node_memory=0.5)
    assert sorted((a.kind, a.job_id, a.killed) for a in alerts) == sorted(
        [("task_memory", "hog", killed[0] if killed else ""), ("task_memory", "greedy", "")]
    )
    assert [a.killed for a in alerts if a.killed] == killed
    assert guard.counts == {"task_memory": 2}
    assert guard.kills == len(killed)
    assert guard.usage["hog/0#1"].memory_mib > 200
    # the condition lasts: no second alert
    assert guard.check(tasks, now=11.0, node_memory=0.5) == []
    assert len(guard.recent()) == 2


def test_a_node_alert_kills_the_largest_best_effort_task(spawn: Callable[[int], int]) -> None:
    small = spawn(20)
    large = spawn(120)
    guaranteed = spawn(200)
    guard = Guard(GuardSpec(kill_best_effort=True, node_memory_threshold=0.9), node="n1")
    tasks = [
        watched("small/0#1", small, 1024, True),
        watched("large/0#1", large, 1024, True),
        watched("big/0#1", guaranteed, 1024, False),
    ]
    (alert,) = guard.check(tasks, now=1.0, node_memory=0.97)
    assert (alert.kind, alert.node, alert.killed) == ("node_memory", "n1", "large/0#1")
    assert alert.message == "node n1: memory use 97% passed 90% (killed best-effort task large/0#1)"
    assert guard.check(tasks, now=2.0, node_memory=0.98) == []
    assert guard.check(tasks, now=3.0, node_memory=0.5) == []
    (again,) = guard.check(tasks, now=4.0, node_memory=0.95)
    assert again.kind == "node_memory"


def test_cpu_threshold_is_optional() -> None:
    assert Guard(GuardSpec()).check([], node_memory=0.1, node_cpu=1.0) == []
    (alert,) = Guard(GuardSpec(node_cpu_threshold=0.8)).check([], node_memory=0.1, node_cpu=0.9)
    assert alert.message == "node local: CPU use 90% passed 80%"
