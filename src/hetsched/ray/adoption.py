"""Finding and adopting the tasks an earlier control plane started on the Ray nodes: the
part of :class:`~hetsched.ray.executor.RayExecutor` a restart uses (the executor protocol's
:class:`~hetsched.drivers.executor.Adopts`).

Contracts: the agents of the live nodes are asked by name (``agent-<Ray node id>`` in the
namespace ``hetsched-<instance>``); a task is adopted by its key, with its output resumed
where the control plane's log files stop; ``sweep`` kills, on every agent, what no live task
accounts for.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hetsched.keys import TaskKey
from hetsched.ray import _api
from hetsched.ray.handle import RayTaskHandle, read_bases, size_of
from hetsched.ray.link import AgentLink, find_agent, gather

__all__ = ["Adoption"]


class Adoption(ABC):
    """What :class:`~hetsched.ray.executor.RayExecutor` adds for adoption (it holds the
    attributes declared here)."""

    home: Path
    handles: dict[str, RayTaskHandle]
    links: dict[str, AgentLink]
    #: task key -> Ray node id, of the tasks the last find_leaders found
    _found: dict[str, str]

    @property
    @abstractmethod
    def namespace(self) -> str:
        """The Ray namespace of this control plane's agents."""

    @abstractmethod
    def log_path(self, job_id: str, task: int, stream: str) -> Path:
        """The control plane's log file of a task's stream."""

    def find_leaders(self) -> dict[str, tuple[int, float]]:
        """Task key -> (pid, start time) of each task the agents of the live nodes run or hold
        an unreported exit of (pid 0 for one that never ran)."""
        calls: dict[Any, str] = {}
        for node in _api.nodes():
            node_id = str(node["NodeID"])
            if node["Alive"] and (actor := find_agent(node_id, self.namespace)) is not None:
                self.links.setdefault(node_id, AgentLink(node_id, actor))
                calls[actor.tasks.remote()] = node_id
        found: dict[str, tuple[int, float]] = {}
        self._found = {}
        for node_id, tasks in gather(calls).items():
            for key, (pid, started) in tasks.items():
                found[key] = (int(pid), float(started))
                self._found[key] = node_id
        return found

    def _node_of(self, key: TaskKey) -> str | None:
        found = self._found.get(str(key))
        if found is not None:
            return found
        recorded = read_bases(self.home, key).get("node_id")
        return str(recorded) if recorded else None

    def adopt(
        self,
        job_id: str,
        task: int,
        run: int,
        pid: int,
        pid_started: float,
        deadline: float | None,
    ) -> RayTaskHandle | None:
        """Watch a task started by an earlier control plane, if its agent still has it
        (found by its key; ``pid`` is not checked: the agent adopted it by pid and start
        time; ``deadline`` is the agent's own). Its output resumes where the log files
        stop."""
        key = TaskKey(job_id, task, run)
        node_id = self._node_of(key)
        if node_id is None:
            return None
        if str(key) not in self._found:
            actor = find_agent(node_id, self.namespace)
            if actor is None or str(key) not in gather({actor.tasks.remote(): "t"}).get("t", {}):
                return None
            self.links.setdefault(node_id, AgentLink(node_id, actor))
        link = self.links[node_id]
        bases = read_bases(self.home, key)
        handle = RayTaskHandle(
            job_id, task, run, str(bases.get("node", "")), node_id, pid, pid_started
        )
        for index, stream in enumerate(("stdout", "stderr")):
            size = size_of(self.log_path(job_id, task, stream))
            handle.received[index] = max(0, size - int(bases.get(stream, size)))
        self.handles[str(key)] = handle
        link.keys.add(str(key))
        return handle

    def recorded_exit(self, job_id: str, task: int, run: int) -> int | None:
        """The exit status of a task that ended while nobody watched, if its agent holds it
        (an exit not yet acknowledged)."""
        key = TaskKey(job_id, task, run)
        node_id = self._node_of(key)
        actor = find_agent(node_id, self.namespace) if node_id else None
        if actor is None:
            return None
        code = gather({actor.recorded_exit.remote(str(key)): "c"}).get("c")
        return None if code is None else int(code)

    def sweep(self, live_keys: Iterable[str]) -> list[str]:
        """Kill the tasks of this instance that no live task accounts for and drop the exits
        held for them; returns their keys."""
        keep = sorted(set(live_keys) | set(self.handles))
        calls = {
            link.actor.sweep.remote(keep): n for n, link in self.links.items() if not link.dead
        }
        return sorted(key for keys in gather(calls).values() for key in keys)
