"""The node agent: one long-lived Ray actor per Ray node, running hetsched's process executor
(:class:`hetsched.agent.executor.Executor`, the local executor itself) on that node.

The control plane (:mod:`hetsched.ray.executor`) creates one :class:`NodeAgent` per node, a
named, detached actor pinned to it by hard node affinity; every task of that node is a
process the agent spawns through the local executor: no actor or worker per task. The
agent's methods are the executor's calls, batched: :meth:`NodeAgent.start` carries every
Start of one control-plane turn for the node, :meth:`NodeAgent.stop` its Stops.

Contracts:
- Exits, output and pids reach the control plane through one long poll per agent,
  :meth:`NodeAgent.sync`: it answers as soon as a watched task ended, a new pid is known or
  output was written (or after ``wait_s``), with the output past the offsets the control
  plane holds. A task's exit is handed out only with (or after) the last of its output, so
  a reader that follows the offsets has all of it when it learns the exit. An exit is
  handed out until the control plane acknowledges it (``acks`` of a later sync): one that
  crashes in between learns it again.
- Maximum runtimes, the SIGKILL after a grace and the notice's SIGTERM are the local
  executor's own, run by the agent's loop whether or not a control plane is connected.
- The agent keeps, per run, a small file beside the local executor's exit file
  (``task-N.run-R.base``: where the run's output starts in the node's log files, and its
  deadline). A recreated agent (its actor died while the node lives) finds its tasks from
  those files: a live one is adopted (same pid and start time), one that ended meanwhile is
  reported with the status its wrapper recorded, one that is gone without one is reported
  lost, each once.
- Tasks see the node's environment (the raylet's), less every ``HETSCHED_*`` variable,
  plus what the local executor adds (the job's variables, devices, identity).
- The node's devices are watched by the agent itself with the discovery ``hetsched up``
  runs (:mod:`hetsched.ray.nodedevices`) when it is given ``discovery``; a changed answer
  ends the long poll at once, as an exit does.
- Many agents may share one machine (``hetsched ray local``): each has its own home, and
  finds, adopts and sweeps only the tasks recorded there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hetsched.agent.executor import Executor
from hetsched.agent.guard import Alert, Guard, Watched
from hetsched.agent.taskenv import device_env, exit_reason, identity_env
from hetsched.drivers.executor import Exit, Start, Stop
from hetsched.framework.profile import GuardSpec
from hetsched.keys import TaskKey
from hetsched.model.device import Device
from hetsched.ray.nodedevices import NodeDevices

__all__ = ["NodeAgent", "NodeExecutor", "node_environment"]

#: variables Ray sets for its worker processes that say nothing about the node
_RAY_WORKER_VARIABLES = frozenset(
    {
        "RAY_JOB_ID",
        "RAY_RAYLET_PID",
        "RAY_CLIENT_MODE",
        "RAY_LD_PRELOAD_ON_WORKERS",
        "PYTHONBREAKPOINT",
        "SPT_NOENV",
    }
)
#: how often a waiting sync looks at the watched tasks' log sizes
_OUTPUT_CHECK_S = 0.1


def node_environment() -> dict[str, str]:
    """The node's environment: the raylet's when it can be read, else this worker's less the
    variables Ray sets for its workers."""
    raylet = os.environ.get("RAY_RAYLET_PID", "")
    if raylet.isdigit():
        with contextlib.suppress(OSError):
            raw = Path(f"/proc/{raylet}/environ").read_bytes()
            pairs = (item.partition(b"=") for item in raw.split(b"\0") if b"=" in item)
            return {k.decode(errors="replace"): v.decode(errors="replace") for k, _s, v in pairs}
    return {k: v for k, v in os.environ.items() if k not in _RAY_WORKER_VARIABLES}


@dataclass(slots=True)
class NodeExecutor(Executor):
    """The local executor with the node's environment for its tasks, and finding and sweeping
    only the tasks recorded in its own home (other agents may share the machine)."""

    node_env: dict[str, str] = field(default_factory=dict)

    def _task_env(
        self,
        key: TaskKey,
        node: str,
        devices: Sequence[tuple[Device, int, int]],
        env: Mapping[str, str],
    ) -> dict[str, str]:
        full_env = {k: v for k, v in self.node_env.items() if not k.startswith("HETSCHED_")}
        full_env.update(env)
        full_env.update(device_env(devices))
        full_env.update(identity_env(key.job, key.task, key.run, node, self.instance))
        return full_env

    def base_file(self, key: TaskKey) -> Path:
        return self.job_dir(key.job) / f"task-{key.task}.run-{key.run}.base"

    def recorded(self) -> dict[str, dict[str, Any]]:
        """Task key -> what was recorded of each run started from this home and not yet
        acknowledged (``out``, ``err``: where its output starts; ``deadline``)."""
        found: dict[str, dict[str, Any]] = {}
        for path in (self.home / "jobs").glob("*/task-*.run-*.base"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                data = json.loads(path.read_text())
                found[str(data["key"])] = data
        return found

    def find_leaders(self) -> dict[str, tuple[int, float]]:
        mine = self.recorded()
        return {k: v for k, v in Executor.find_leaders(self).items() if k in mine}

    def sweep(self, live_keys: Iterable[str]) -> list[int]:
        keep = set(live_keys)
        killed = []
        for key, (pid, _started) in self.find_leaders().items():
            if key not in keep:
                self.kill_pid(pid)
                killed.append(pid)
        return killed


class NodeAgent:
    """The agent of one Ray node (see the module docstring). ``home``: its folder on the node;
    ``instance``: the control plane's instance (``HETSCHED_INSTANCE`` of its tasks)."""

    def __init__(
        self,
        instance: str,
        node_id: str,
        home: str,
        kill_grace_s: float = 5.0,
        discovery: Sequence[str] | None = None,
        watch_interval_s: float = 2.0,
    ) -> None:
        self.node_id = node_id
        #: the node's devices (:mod:`hetsched.ray.nodedevices`); None: Ray's resources are
        #: the node's devices (``hetsched.io/discovery=ray``), nothing is watched here
        self.devices = (
            None if discovery is None else NodeDevices.create(discovery, watch_interval_s)
        )
        self.executor = NodeExecutor(
            Path(home), instance, kill_grace_s=kill_grace_s, node_env=node_environment()
        )
        self.executor.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        #: ended, not yet acknowledged: key -> exit
        self.ended: dict[str, Exit] = {}
        #: key -> [out base, err base] of each run it watches or holds an exit of
        self.bases: dict[str, list[int]] = {}
        #: key -> (pid, start time) of the same runs (0 for one that never ran)
        self.pids: dict[str, tuple[int, float]] = {}
        self._wake: asyncio.Event | None = None
        self._news: asyncio.Event | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._swept: set[str] = set()
        #: the overcommit guard of this node's tasks (made at the first guard round), the
        #: alerts not yet handed out, and why each task it killed was killed
        self._guard: Guard | None = None
        self._alerts: list[Alert] = []
        self._guard_kills: dict[str, str] = {}
        self._recover()

    # -- the control plane's calls ----------------------------------------------------------

    def start(self, starts: Sequence[Start]) -> None:
        """Spawn each task (one turn's Starts for this node); one that cannot be spawned is
        reported through :meth:`sync` (``cannot start: ...``)."""
        self._ensure_loop()
        executor = self.executor
        for start in starts:
            key = str(start.key)
            if key in executor.handles or key in self.ended:
                continue  # started already: a start is never repeated
            bases = [_size(executor.log_path(start.key.job, start.key.task, s)) for s in _STREAMS]
            launch = start.launch
            deadline = (
                time.time() + launch.max_runtime_s if launch and launch.max_runtime_s else None
            )
            self.bases[key] = bases
            executor.job_dir(start.key.job).mkdir(parents=True, exist_ok=True, mode=0o700)
            executor.start([start], time.time())
            handle = executor.handles.get(key)
            self.pids[key] = (handle.pid, handle.pid_started) if handle else (0, 0.0)
            record = {"key": key, "out": bases[0], "err": bases[1], "deadline": deadline}
            record["pid"], record["started"] = self.pids[key]
            # after the spawn: what a recreated agent finds (a crash in between leaves a
            # process no record accounts for: its exit is never reported, the run is lost)
            _write_json(executor.base_file(start.key), record)
        self._poke()

    def stop(self, stops: Sequence[Stop]) -> None:
        """Stop tasks as the local executor does (notice, SIGTERM, SIGKILL after the grace)."""
        # a task that ended already (or never came) has its exit: no second one
        self.executor.stop([s for s in stops if str(s.key) in self.executor.handles], time.time())
        self._poke()

    def kill(self, keys: Sequence[str]) -> None:
        """SIGKILL the tasks' groups now."""
        for key in keys:
            self.executor.kill(key)
        self._poke()

    def guard(self, spec: Mapping[str, Any], tasks: Sequence[Mapping[str, Any]]) -> None:
        """One round of the overcommit guard (the local executor's own,
        :class:`hetsched.agent.guard.Guard`) over this node's tasks: ``spec`` is the profile's
        guard, ``tasks`` each task as the control plane knows it (a
        :class:`~hetsched.agent.guard.Watched` as plain data: its request, whether it is
        best-effort; the pid is this node's). What the guard names is killed here; its
        alerts go out with the next sync, and the killed task's exit says why."""
        self._ensure_loop()
        guard_spec = GuardSpec.model_validate(dict(spec))
        handles = self.executor.handles
        rows = [Watched(**row) for row in tasks if row["key"] in handles]
        local = [replace(t, pid=handles[t.key].pid) for t in rows if not handles[t.key].stopping]
        if self._guard is None or self._guard.spec != guard_spec:
            backends = self.devices.watcher.backends if self.devices is not None else []
            nvidia = [b for b in backends if b.name == "nvidia"]
            memory = getattr(nvidia[0], "process_memory", None) if nvidia else None
            node = local[0].node if local else self.node_id
            self._guard = Guard(guard_spec, node, memory)
        alerts = self._guard.check(local)
        for alert in alerts:
            if alert.killed and self.executor.kill(alert.killed):
                self._guard_kills[alert.killed] = alert.message
        self._alerts += alerts
        if alerts and self._news is not None:
            self._news.set()
        self._poke()

    def tasks(self) -> dict[str, tuple[int, float]]:
        """Key -> (pid, start time) of every task it runs or holds an unacknowledged exit of
        (pid 0 for one that never ran)."""
        return {k: self.pids.get(k, (0, 0.0)) for k in (*self.executor.handles, *self.ended)}

    def recorded_exit(self, key: str) -> int | None:
        exit_ = self.ended.get(key)
        return None if exit_ is None else exit_.code

    def sweep(self, live_keys: Sequence[str]) -> list[str]:
        """Kill the tasks and drop the exits that no live task of the control plane accounts
        for; returns their keys."""
        keep = set(live_keys)
        gone = sorted(k for k in self.tasks() if k not in keep)
        for key in gone:
            if key in self.executor.handles:
                self.executor.kill(key)
                self.executor.handles[key].stopping = True
                self._swept.add(key)  # its exit is nobody's: forgotten when it comes
        self.acknowledge([k for k in gone if k in self.ended])
        self._poke()
        return gone

    def acknowledge(self, keys: Iterable[str]) -> None:
        """The control plane recorded these exits: forget them and their files here."""
        executor = self.executor
        for key in keys:
            if self.ended.pop(key, None) is None:
                continue
            self.bases.pop(key, None)
            self.pids.pop(key, None)
            task = TaskKey.parse(key)
            executor.base_file(task).unlink(missing_ok=True)
            executor.exit_file(task.job, task.task, task.run).unlink(missing_ok=True)
            if not any(k.startswith(f"{task.job}/{task.task}#") for k in self.bases):
                for stream in _STREAMS:
                    executor.log_path(task.job, task.task, stream).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                executor.job_dir(task.job).rmdir()

    async def sync(
        self,
        watched: Mapping[str, tuple[int, int, bool]],
        acks: Sequence[str],
        wait_s: float,
        limit: int,
        devices_seen: int = -1,
    ) -> dict[str, Any]:
        """The long poll (see the module docstring). ``watched``: key -> (stdout bytes held,
        stderr bytes held, pid known) of each task the control plane watches here;
        ``devices_seen``: the version of the node's device answer the control plane holds.
        Answers ``out`` (key -> (stdout, stderr) past the offsets), ``pids`` (key -> (pid,
        start)), ``exits`` and ``devices`` ((version, devices) when the node's devices
        changed since that version, else None)."""
        self._ensure_loop()
        self.acknowledge(acks)
        assert self._news is not None
        deadline = time.monotonic() + wait_s
        while True:
            self._news.clear()
            reply = self._collect(watched, limit)
            reply["devices"] = None if self.devices is None else self.devices.since(devices_seen)
            reply["alerts"], self._alerts = [a.to_dict() for a in self._alerts], []
            left = deadline - time.monotonic()
            if any(reply.values()) or left <= 0:
                return reply
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._news.wait(), min(left, _OUTPUT_CHECK_S))

    async def close(self) -> None:
        """End the agent's loop and its device watch; its tasks run on (an agent in a Ray
        actor ends with its process; this is for an agent run in a plain event loop). A
        cancel that Python 3.11's ``wait_for`` swallows is repeated."""
        if self.devices is not None:
            self.devices.stop()
        task = self._loop_task
        while task is not None and not task.done():
            task.cancel()
            await asyncio.sleep(0.01)

    def ray_view(self) -> dict[str, Any]:
        """Where Ray says this agent runs and what it gave it (nothing: hetsched asked Ray
        for no resource)."""
        import ray

        context = ray.get_runtime_context()
        return {
            "node_id": context.get_node_id(),
            "assigned": dict(context.get_assigned_resources()),  # type: ignore[no-untyped-call]
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "worker_pid": os.getpid(),
        }

    # -- inside -------------------------------------------------------------------------------

    def _collect(self, watched: Mapping[str, tuple[int, int, bool]], limit: int) -> dict[str, Any]:
        out: dict[str, tuple[bytes, bytes]] = {}
        pids: dict[str, tuple[int, float]] = {}
        exits: list[Exit] = []
        handles = self.executor.handles
        for key, (held_out, held_err, pid_known) in watched.items():
            bases = self.bases.get(key)
            if bases is None:
                continue
            task = TaskKey.parse(key)
            data, drained = [], True
            for base, held, stream in zip(bases, (held_out, held_err), _STREAMS, strict=True):
                path = self.executor.log_path(task.job, task.task, stream)
                chunk = _read(path, base + held, limit)
                data.append(chunk)
                drained = drained and base + held + len(chunk) >= _size(path)
            if data[0] or data[1]:
                out[key] = (data[0], data[1])
            handle = handles.get(key)
            if handle is not None and not pid_known:
                pids[key] = (handle.pid, handle.pid_started)
            if key in self.ended and drained:
                exits.append(self.ended[key])
        return {"out": out, "pids": pids, "exits": exits}

    def _ensure_loop(self) -> None:
        if self._loop_task is not None:
            return
        loop = asyncio.get_running_loop()
        self._wake, self._news = asyncio.Event(), asyncio.Event()
        wake = self._wake

        def on_exit() -> None:  # from the executor's exit watcher thread
            loop.call_soon_threadsafe(wake.set)

        self.executor.on_exit = on_exit
        self._loop_task = loop.create_task(self._run())
        if self.devices is not None:
            news = self._news

            def on_change() -> None:  # from the device watch thread
                loop.call_soon_threadsafe(news.set)

            self.devices.start(on_change)

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        """Reap exits as they happen and run the executor's timers (grace, notice, maximum
        runtime), with or without a control plane."""
        assert self._wake is not None and self._news is not None
        while True:
            self._wake.clear()
            exits = self.executor.poll(time.time())
            for exit_ in exits:
                why = self._guard_kills.pop(str(exit_.key), None)
                if why is not None and not exit_.stopped:
                    exit_ = exit_._replace(reason=f"killed by the overcommit guard: {why}")
                # the first exit counts: a stop of a task that had ended adds a second
                self.ended.setdefault(str(exit_.key), exit_)
            swept = [str(e.key) for e in exits if str(e.key) in self._swept]
            self.acknowledge(swept)
            self._swept.difference_update(swept)
            if exits:
                self._news.set()
            due = self.executor.next_due()
            timeout = 1.0 if due is None else min(1.0, max(0.0, due - time.time()))
            if not self.executor.exits_reported:
                timeout = min(timeout, 0.2)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def _recover(self) -> None:
        """Find the tasks an earlier agent of this node started (see the module docstring)."""
        executor = self.executor
        leaders = executor.find_leaders()
        for key, record in executor.recorded().items():
            task = TaskKey.parse(key)
            self.bases[key] = [int(record["out"]), int(record["err"])]
            self.pids[key] = (int(record.get("pid", 0)), float(record.get("started", 0.0)))
            if key in leaders:
                pid, started = leaders[key]
                if executor.adopt(task.job, task.task, task.run, pid, started, record["deadline"]):
                    self.pids[key] = (pid, started)
                    continue
            code = executor.recorded_exit(task.job, task.task, task.run)
            if code is not None:
                reason = exit_reason(code)
                self.ended[key] = Exit.of(task.job, task.task, task.run, code, False, reason)
            else:
                # its wrapper is gone (Ray kills a dead worker's children): what is left of
                # its group goes too, nothing of a lost run may run on
                if self.pids[key][0] > 0:
                    executor.kill_pid(self.pids[key][0])
                why = f"lost: it ended while the agent of its node was down (node {self.node_id})"
                self.ended[key] = Exit.of(task.job, task.task, task.run, None, False, why)


_STREAMS = ("stdout", "stderr")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read(path: Path, offset: int, limit: int) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(limit)
    except OSError:
        return b""


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(data))
    partial.replace(path)
