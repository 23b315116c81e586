"""The node agent on this machine, without Ray: it runs the local executor, hands out each
task's output in order with its exit last, escalates stops by itself, and a new agent on the
same home finds the tasks of the one before it (adopts the live ones, reports the others
once)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.agent.executor import Executor
from hetsched.cluster.placement import Placement
from hetsched.drivers.executor import Exit, Launch, Start, Stop
from hetsched.keys import TaskKey
from hetsched.ray.agent import NodeAgent, NodeExecutor

KEY = TaskKey("job1", 0, 1)


def _agent(tmp_path: Path) -> NodeAgent:
    return NodeAgent("agent-test", "node-id", str(tmp_path / "node"), kill_grace_s=0.5)


def _start(key: TaskKey, command: list[str], **launch: Any) -> Start:
    env = launch.pop("env", {})
    return Start(key, Placement("n", 100, 64), launch=Launch(tuple(command), env, **launch))


async def _drain(
    agent: NodeAgent, key: TaskKey = KEY, limit: int = 1 << 20, timeout_s: float = 30
) -> tuple[bytes, bytes, Exit, int]:
    """Follow one task as the control plane does: (stdout, stderr, exit, answers); the exit
    is acknowledged."""
    out, err = b"", b""
    deadline = time.monotonic() + timeout_s
    answers = 0
    while time.monotonic() < deadline:
        reply = await agent.sync({str(key): (len(out), len(err), True)}, [], 0.5, limit)
        answers += 1
        chunks = reply["out"].get(str(key), (b"", b""))
        out, err = out + chunks[0], err + chunks[1]
        if reply["exits"]:
            (exit_,) = reply["exits"]
            await agent.sync({}, [str(key)], 0, limit)
            return out, err, exit_, answers
    raise AssertionError("the task did not end")


def _run(tmp_path: Path, command: list[str], **launch: Any) -> tuple[bytes, bytes, Exit]:
    async def body() -> tuple[bytes, bytes, Exit]:
        agent = _agent(tmp_path)
        agent.start([_start(KEY, command, **launch)])
        out, err, exit_, _ = await _drain(agent)
        return out, err, exit_

    return asyncio.run(body())


def test_the_agent_runs_the_local_executor_itself() -> None:
    # not a copy: a change to the local executor reaches Ray's tasks
    assert issubclass(NodeExecutor, Executor)
    assert NodeExecutor.spawn is Executor.spawn and NodeExecutor.poll is Executor.poll


@pytest.mark.parametrize(
    ("command", "code", "reason"),
    [
        (["sh", "-c", "echo out; echo err >&2; exit 4"], 4, "exit code 4"),
        (["true"], 0, "exit code 0"),
        (["/no/such/program"], 127, "exit code 127"),
        (["sh", "-c", "kill -TERM $$"], 143, "exit code 143 (signal 15)"),
        (["sh", "-c", "kill -KILL $$"], 137, "exit code 137 (signal 9)"),
    ],
)
def test_exit_codes_as_the_local_executor_reports_them(
    tmp_path: Path, command: list[str], code: int, reason: str
) -> None:
    _out, _err, exit_ = _run(tmp_path, command)
    assert (exit_.code, exit_.reason, exit_.stopped) == (code, reason, False)


def test_output_comes_in_order_and_the_exit_only_after_all_of_it(tmp_path: Path) -> None:
    script = "import sys\nfor i in range(2000): print(f'line {i}')\nsys.exit(3)"

    async def body() -> tuple[bytes, Exit, int]:
        agent = _agent(tmp_path)
        agent.start([_start(KEY, [sys.executable, "-c", script])])
        out, _err, exit_, answers = await _drain(agent, limit=1000)
        return out, exit_, answers

    out, exit_, answers = asyncio.run(body())
    assert exit_.code == 3
    lines = out.decode().splitlines()
    assert lines == ["--- hetsched: run 1 of task 0 on n ---"] + [f"line {i}" for i in range(2000)]
    # 1000 bytes at most per answer: the exit waited for the rest
    assert answers > len(out) // 1000


@settings(max_examples=6, deadline=None)
@given(limit=st.integers(1, 3000), lines=st.integers(0, 300))
def test_following_the_offsets_gives_exactly_the_output_then_the_exit(
    tmp_path_factory: pytest.TempPathFactory, limit: int, lines: int
) -> None:
    tmp_path = tmp_path_factory.mktemp("agent")
    script = f"import sys\nfor i in range({lines}): print(i); print(-i, file=sys.stderr)"

    async def body() -> tuple[bytes, bytes, Exit]:
        agent = _agent(tmp_path)
        agent.start([_start(KEY, [sys.executable, "-c", script])])
        out, err, exit_, _ = await _drain(agent, limit=limit)
        return out, err, exit_

    out, err, exit_ = asyncio.run(body())
    assert exit_.code == 0
    assert out.decode().splitlines()[1:] == [str(i) for i in range(lines)]  # after the header
    assert err.decode().split() == [str(-i) for i in range(lines)]
    # acknowledged: nothing of the task is left on the node
    assert [p for p in (tmp_path / "node").rglob("*") if p.is_file()] == []


def test_a_start_without_a_command_is_reported_not_raised(tmp_path: Path) -> None:
    async def body() -> Exit:
        agent = _agent(tmp_path)
        agent.start([Start(KEY, Placement("n", 100, 64))])
        return (await _drain(agent))[2]

    exit_ = asyncio.run(body())
    assert (exit_.code, exit_.reason) == (None, "cannot start: no command to run")


def test_the_task_has_its_own_group_and_env_without_the_nodes_hetsched_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HETSCHED_SECRET", "no")
    show = (
        "import os; print(os.getpgid(0) == os.getsid(0) == os.getppid(), os.environ['MINE'],"
        " os.environ['HETSCHED_INSTANCE'], 'HETSCHED_SECRET' in os.environ)"
    )
    out, _err, exit_ = _run(tmp_path, [sys.executable, "-c", show], env={"MINE": "x"})
    assert exit_.code == 0
    assert out.decode().splitlines()[-1] == "True x agent-test False"


def test_stops_escalate_on_the_node_without_the_control_plane(tmp_path: Path) -> None:
    stubborn = ["sh", "-c", "trap '' TERM; (trap '' TERM; sleep 60) & sleep 60"]

    async def body() -> tuple[Exit, list[psutil.Process]]:
        agent = _agent(tmp_path)
        agent.start([_start(KEY, stubborn)])
        family = await _family(agent.executor.handles[str(KEY)].pid, 3)
        agent.stop([Stop(KEY, Placement("n", 0, 0), 0.0, 0.3, "stopped")])
        return (await _drain(agent))[2], family

    exit_, family = asyncio.run(body())
    assert (exit_.code, exit_.stopped, exit_.reason) == (-9, True, "killed by signal 9")
    _gone, alive = psutil.wait_procs(family, timeout=5)
    assert alive == []


def test_the_maximum_runtime_is_enforced_by_the_agent(tmp_path: Path) -> None:
    _out, _err, exit_ = _run(tmp_path, ["sleep", "30"], max_runtime_s=0.5)
    assert (exit_.stopped, exit_.reason) == (False, "exceeded its maximum runtime")


def test_a_new_agent_adopts_the_live_tasks_and_reports_the_ended_once(tmp_path: Path) -> None:
    keys = {name: TaskKey(name, 0, 1) for name in ("runs", "ends", "reported")}

    async def first() -> dict[str, int]:
        agent = _agent(tmp_path)
        agent.start(
            [
                _start(keys["runs"], ["sleep", "60"]),
                _start(keys["ends"], ["sh", "-c", "sleep 1; exit 5"]),
                _start(keys["reported"], ["true"]),
            ]
        )
        await _drain(agent, keys["reported"])  # reported and acknowledged
        pids = {
            key.job: agent.executor.handles[str(key)].pid for key in (keys["runs"], keys["ends"])
        }
        # the agent dies here: its tasks run on (their wrappers record their status)
        agent.executor.shutdown()
        return pids

    async def second(ends: int) -> tuple[dict[str, tuple[int, float]], list[Exit], Any]:
        deadline = time.monotonic() + 30
        while psutil.pid_exists(ends) and psutil.Process(ends).status() != "zombie":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)  # "ends" ends while no agent watches
        agent = _agent(tmp_path)
        tasks = agent.tasks()
        ended = (await _drain(agent, keys["ends"]))[2]
        agent.stop([Stop(keys["runs"], Placement("n", 0, 0), 0.0, 0.5, "stopped")])
        stopped = (await _drain(agent, keys["runs"]))[2]
        again = await agent.sync({str(k): (0, 0, True) for k in keys.values()}, [], 0.2, 100)
        return tasks, [ended, stopped], again["exits"]

    pids = asyncio.run(first())
    tasks, exits, again = asyncio.run(second(pids["ends"]))
    # the live one is adopted with the same process; the ended one is held with its status
    assert {key: pid for key, (pid, _started) in tasks.items()} == {
        "runs/0#1": pids["runs"],
        "ends/0#1": pids["ends"],
    }
    assert all(started > 0 for _pid, started in tasks.values())
    assert [(e.job_id, e.code, e.stopped, e.reason) for e in exits] == [
        ("ends", 5, False, "exit code 5"),
        ("runs", 143, True, "exit code 143 (signal 15)"),
    ]
    assert again == []  # each once
    assert [p for p in (tmp_path / "node").rglob("*") if p.is_file()] == []


async def _family(group: int, at_least: int, timeout_s: float = 30) -> list[psutil.Process]:
    """The processes of group ``group`` once there are ``at_least`` of them (the task's
    shell has started its children): waited for, never assumed after a fixed pause."""
    deadline = time.monotonic() + timeout_s
    while len(family := [p for p in psutil.process_iter() if _pgid(p.pid) == group]) < at_least:
        assert time.monotonic() < deadline, f"group {group}: {len(family)} processes"
        await asyncio.sleep(0.02)
    return family


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1
