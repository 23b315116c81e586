"""The new engine of docs/concepts.md ("Adding an engine") is the example file, word for
word, and runs jobs through the interpreter: start, exit, the job's end."""

from __future__ import annotations

import importlib.util
import re
import sys
import time
from types import ModuleType
from typing import Any

import pytest

from builders import ROOT, gpu_node, job
from hetsched.cluster.state import ClusterState
from hetsched.drivers import (
    Adopts,
    Executor,
    Fences,
    GivesNotice,
    Interpreter,
    KillsByPid,
    Launch,
    Observer,
    Polled,
    ProcessTasks,
    in_order,
)
from hetsched.scheduler import Event, JobCancelled, JobSubmitted, JobTransition, Scheduler

EXAMPLE = ROOT / "examples" / "executors" / "popen_engine.py"


def _engine() -> ModuleType:
    """The example file as a module (registered first: its dataclasses look it up)."""
    name = "hetsched_example_popen_engine"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_the_docs_show_the_example_file_word_for_word() -> None:
    text = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    section = text.split("## Adding an engine", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "the section has no python block"
    assert match.group(1) == EXAMPLE.read_text(encoding="utf-8")
    # one class, as the docs say, well under 300 lines
    code = match.group(1)
    assert len(code.splitlines()) < 300
    assert re.findall(r"^class (\w+)", code, re.MULTILINE) == ["_Task", "PopenExecutor"]


def test_the_example_has_the_protocol_and_no_optional_capability() -> None:
    executor = _engine().PopenExecutor()
    assert isinstance(executor, Executor)
    capabilities = (Polled, Adopts, Fences, GivesNotice, KillsByPid, ProcessTasks)
    assert [c.__name__ for c in capabilities if isinstance(executor, c)] == []


class _Told(Observer):
    def __init__(self) -> None:
        self.states: list[str] = []

    def transitioned(self, change: JobTransition) -> None:
        self.states.append(f"{change.target}: {change.cause}")


def _run(command: tuple[str, ...], cancel: bool = False) -> list[str]:
    """One single-task job on the example engine, driven as a driver would drive it: the
    core's actions through the interpreter, the engine's exits back as events."""
    executor: Any = _engine().PopenExecutor({"a": Launch(command, {"MINE": "1"})})
    core = Scheduler(ClusterState([gpu_node("n", gpus=1)]))
    told = _Told()
    interpreter = Interpreter(executor, told, kill_grace_s=0.5)
    interpreter.carry_out(core.handle([JobSubmitted(job("a", gpus=1))], 0.0), 0.0)
    assert interpreter.running, "the Bind started its task"
    events: list[Event] = [JobCancelled("a", "test")] if cancel else []
    deadline = time.monotonic() + 30  # a bound on a hung test, not a measurement
    while interpreter.running or interpreter.stopping or events:
        now = time.time()
        for exit_ in executor.poll(now):
            event = interpreter.report(exit_)
            if event is not None:
                events.append(event)
        if events:
            interpreter.carry_out(core.handle(in_order(events), now), now)
            events = []
        assert time.monotonic() < deadline, "the job never ended"
        time.sleep(0.01)
    executor.shutdown()
    return told.states


@pytest.mark.parametrize(
    ("command", "cancel", "last"),
    [
        (("sh", "-c", 'test "$MINE" = 1'), False, "succeeded: all tasks succeeded"),
        (("sh", "-c", "exit 3"), False, "failed: task 0 failed: exit code 3"),
        (("sleep", "30"), True, "cancelled: test"),
        (("/no/such/program",), False, "failed: task 0 failed: cannot start"),
    ],
)
def test_the_example_engine_runs_a_job_from_bind_to_its_end(
    command: tuple[str, ...], cancel: bool, last: str
) -> None:
    states = _run(command, cancel)
    assert states[0] == "pending: submitted"
    # a program that cannot be spawned is a failed start: its reason says so
    assert states[1].startswith("running: run 1: bound 1 task(s) to n")
    assert states[-1].startswith(last)
