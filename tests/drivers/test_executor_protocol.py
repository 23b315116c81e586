"""One executor protocol: stated in one module, implemented by every engine, its optional
capabilities found with ``isinstance`` and never by probing attributes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from builders import ROOT
from hetsched.agent.executor import Executor as LocalExecutor
from hetsched.drivers import (
    Adopts,
    Executor,
    Exit,
    Fences,
    GivesNotice,
    KillsByPid,
    Polled,
    ProcessExecutor,
    ProcessTasks,
)
from hetsched.k8s.podexec import PodExecutor
from hetsched.keys import TaskKey
from hetsched.ray.executor import RayExecutor

SRC = ROOT / "src" / "hetsched"
PROTOCOL = SRC / "drivers" / "executor.py"
CAPABILITIES = (Polled, Adopts, Fences, GivesNotice, KillsByPid, ProcessTasks, ProcessExecutor)


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in SRC.rglob("*.py")]


def _is_protocol(node: ast.ClassDef) -> bool:
    names = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
    return "Protocol" in names


def test_exactly_one_module_defines_executor_protocols() -> None:
    found = {
        (path.relative_to(SRC).as_posix(), node.name)
        for path, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and "Executor" in node.name and _is_protocol(node)
    }
    assert {module for module, _ in found} == {"drivers/executor.py"}
    assert {name for _, name in found} == {"Executor", "ProcessExecutor"}


def _capability_members() -> set[str]:
    """Every member the optional capabilities declare (methods and attributes)."""
    members: set[str] = set()
    names = {c.__name__ for c in CAPABILITIES}
    for node in ast.parse(PROTOCOL.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and node.name in names:
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
    return members


def test_no_module_probes_an_executor_with_getattr_or_hasattr() -> None:
    members = _capability_members()
    assert {"adopt", "fence_backstop_s", "in_notice", "kill_pid", "on_exit"} <= members
    probes = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id not in {"getattr", "hasattr"} or len(node.args) < 2:
                continue
            target, name = ast.unparse(node.args[0]), node.args[1]
            named = isinstance(name, ast.Constant) and name.value in members
            if "executor" in target.lower() or named:
                probes.append(f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(node)}")
    assert probes == []


def _capabilities(executor: object) -> set[str]:
    return {c.__name__ for c in CAPABILITIES if isinstance(executor, c)}


def test_each_engine_has_the_protocol_and_the_capabilities_it_claims(tmp_path: Path) -> None:
    local = LocalExecutor(tmp_path, "protocol-test")
    ray = RayExecutor(tmp_path, "protocol-test", lambda node: None)
    assert isinstance(local, Executor) and isinstance(ray, Executor)
    assert _capabilities(local) == {c.__name__ for c in CAPABILITIES}
    assert _capabilities(ray) == {
        "Polled",
        "Adopts",
        "GivesNotice",
        "ProcessTasks",
        "ProcessExecutor",
    }
    # the Kubernetes executor's and the simulator's exits come by callback
    assert issubclass(PodExecutor, Executor) and issubclass(PodExecutor, GivesNotice)
    assert not issubclass(PodExecutor, Adopts) and not issubclass(PodExecutor, KillsByPid)
    from hetsched.sim.engine.processes import Clock

    assert issubclass(Clock, Executor) and not issubclass(Clock, GivesNotice)


@pytest.mark.parametrize(
    ("code", "stopped", "not_started", "succeeded"),
    [(0, False, False, True), (3, False, False, False), (None, True, False, False),
     (0, True, False, True), (125, False, True, False), (-9, True, False, False)],
)  # fmt: skip
def test_a_process_exit_is_the_one_exit_type(
    code: int | None, stopped: bool, not_started: bool, succeeded: bool
) -> None:
    exit_ = Exit.of("j", 2, 3, code, stopped, "why", not_started)
    assert exit_ == Exit(TaskKey("j", 2, 3), succeeded, "why", code, stopped, not_started)
    assert (exit_.job_id, exit_.task, exit_.run, exit_.exit_code) == ("j", 2, 3, code)
