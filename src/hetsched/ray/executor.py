"""The Ray task executor: runs bound tasks on the Ray nodes hetsched chose, with the surface
and the meaning of the local process executor (:mod:`hetsched.agent.executor`).

Each task is a :class:`~hetsched.ray.runner.TaskRunner` actor: named by its task key
(``job/task#run``) in the namespace ``hetsched-<instance>``, detached (it outlives the
control plane's driver), pinned to the chosen node by hard node affinity, asking Ray for no
CPU, GPU or memory (hetsched did the accounting and chose the devices; Ray sets nothing).

Contracts (those of the local executor, and where they differ):
- ``start`` returns at once; the process starts when Ray has placed the actor (its pid is
  known from the first answer, ``handle.pid`` is 0 until then). It raises
  :class:`RayStartError` (an ``OSError``) when Ray refuses the actor.
- The task's environment: the node's, less ``HETSCHED_*``, plus the job's variables,
  ``CUDA_VISIBLE_DEVICES`` / ``ROCR_VISIBLE_DEVICES`` / ``HIP_VISIBLE_DEVICES`` /
  ``HETSCHED_DEVICES`` exactly as the local executor sets them, and ``HETSCHED_JOB_ID``,
  ``HETSCHED_TASK_INDEX``, ``HETSCHED_RUN``, ``HETSCHED_NODE``, ``HETSCHED_TASK_KEY``,
  ``HETSCHED_INSTANCE``.
- Its own process group, stdin from /dev/null; exit codes as ``sh`` reports them; when the
  main process ends the rest of its group is killed.
- Logs: the output streams back into ``<home>/jobs/<id>/task-<n>.out|.err`` (0600, each run
  after a header line), the files the API serves and ``hetsched logs -f`` follows. An exit is
  reported only once all the output before it is in those files.
- ``stop``: SIGTERM to the group now, SIGKILL after the grace; if the actor has not confirmed
  the end ``force_after_s`` later (a hung worker, an unreachable node), ``ray.kill`` of the
  actor, whose supervisor then kills the group. Maximum runtimes are enforced the same way.
- A task whose actor dies without an exit status (its node died, its worker crashed) is
  reported with ``exit_code`` None and a reason that says which node died: a lost task. One
  lost with its node is reported only once the driver has asked it to stop (the core's
  answer to the node's removal, which the inventory reports) or ``node_loss_wait_s`` after
  Ray called the node dead, whichever comes first: a task exit reported before the node's
  removal would read as the task's own failure, and the job would not be requeued.
- Exactly once: an exit is reported by one :meth:`poll`; its actor is retired (its node files
  removed, then ``ray.kill``) by the next one, so the driver must record what a poll returned
  before it polls again. A control plane that crashes in between finds the actor again
  (:meth:`adopt`, :meth:`find_leaders`) and learns the exit once more; one that had recorded it
  sweeps the actor away (:meth:`sweep`).
- Driven by one thread; not thread-safe. It needs a connected Ray driver
  (:func:`hetsched.ray._api.connect`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetsched.agent.executor import (
    TaskExit,
    device_env,
    identity_env,
    job_folder,
    open_task_log,
    task_key,
    task_log,
)
from hetsched.cluster.placement import Placement
from hetsched.model.device import Device
from hetsched.ray import _api
from hetsched.ray.runner import TaskRunner

__all__ = ["RayExecutor", "RayStartError", "RayTaskHandle"]

log = logging.getLogger(__name__)

#: seconds to wait for an actor's answer when adopting or looking for tasks
_LOOKUP_TIMEOUT_S = 10.0
#: how often the actors being retired are looked at while nothing else is due
_RETIRE_CHECK_S = 0.5
#: threads per runner actor: a long poll, a signal, a status and retire at once
_RUNNER_THREADS = 4


class RayStartError(OSError):
    """Ray would not take the task (unknown node, a name already taken, no connection). An
    ``OSError`` so that a driver treats it like a process that could not be spawned."""


@dataclass(slots=True)
class RayTaskHandle:
    job_id: str
    task: int
    run: int
    #: the hetsched node and its Ray node id
    node: str
    node_id: str
    actor: Any
    #: on the node; 0 until the runner has said
    pid: int = 0
    pid_started: float = 0.0
    deadline: float | None = None
    kill_at: float | None = None
    #: when the actor is killed through Ray if the task has not ended by then
    force_at: float | None = None
    stopping: bool = False
    timed_out: bool = False
    killed_by_ray: bool = False
    #: bytes of this run's stdout and stderr received so far
    received: list[int] = field(default_factory=lambda: [0, 0])
    #: the outstanding long poll (an ObjectRef) and when to issue the next one
    call: Any = None
    next_call: float = 0.0
    #: lost with its node: when that was seen, and the exit waiting to be reported
    lost_at: float | None = None
    lost_exit: TaskExit | None = None

    @property
    def key(self) -> str:
        return task_key(self.job_id, self.task, self.run)


@dataclass
class RayExecutor:
    home: Path
    #: marks this control plane's tasks (the Ray namespace is ``hetsched-<instance>``)
    instance: str
    #: the Ray node id of a hetsched node (``RayInventory.node_id``)
    node_id_of: Callable[[str], str | None]
    kill_grace_s: float = 5.0
    #: after the SIGKILL, how long the actor has to confirm before ``ray.kill``
    force_after_s: float = 5.0
    #: where task files go on the nodes (default: ``<tmp>/hetsched-ray/<namespace>``)
    node_dir: str | None = None
    #: how long a runner holds a long poll open
    sync_wait_s: float = 1.0
    #: the most bytes per stream one answer carries
    chunk_bytes: int = 1 << 20
    #: how long a task lost with its node waits for the driver's stop before it is reported
    node_loss_wait_s: float = 10.0
    handles: dict[str, RayTaskHandle] = field(default_factory=dict)
    #: the driver's wake-up; never called: exits are learnt by polling (exits_reported)
    on_exit: Callable[[], None] | None = None
    #: actors whose exit the last poll reported: retired by the next
    _reported: list[Any] = field(default_factory=list)
    #: retire call -> (actor, when it was asked)
    _retiring: dict[Any, tuple[Any, float]] = field(default_factory=dict)
    _runner: Any = None

    @property
    def namespace(self) -> str:
        return f"hetsched-{self.instance}"

    def job_dir(self, job_id: str) -> Path:
        return job_folder(self.home, job_id)

    def log_path(self, job_id: str, task: int, stream: str) -> Path:
        return task_log(self.home, job_id, task, stream)

    def _bases_path(self, job_id: str, task: int, run: int) -> Path:
        """Where this run's output starts in the log files (survives a control-plane crash)."""
        return self.job_dir(job_id) / f"task-{task}.run-{run}.ray.json"

    # -- start ----------------------------------------------------------------------------

    def start(
        self,
        job_id: str,
        task: int,
        run: int,
        placement: Placement,
        devices: Sequence[tuple[Device, int, int]],
        command: Sequence[str],
        env: Mapping[str, str],
        workdir: str | None,
        max_runtime_s: float | None,
        run_as: Any = None,
        fence: Path | None = None,
    ) -> RayTaskHandle:
        """Create the task's actor on its node; raises RayStartError if Ray will not.
        ``run_as`` (an object with ``uid`` and ``gid``) needs the node's Ray worker to run as
        root. A federation's lease (``fence``) is a file on the control plane's machine that
        no Ray node can read: such a task is refused."""
        if fence is not None:
            raise RayStartError("a task fenced by a federation's lease needs the local executor")
        node_id = self.node_id_of(placement.node)
        if node_id is None:
            raise RayStartError(f"node {placement.node} is not in the Ray cluster")
        key = task_key(job_id, task, run)
        self._write_header(job_id, task, run, placement.node, node_id)
        overlay = dict(env)
        overlay.update(device_env(devices))
        overlay.update(identity_env(job_id, task, run, placement.node, self.instance))
        node_dir = Path(self.node_dir or Path(tempfile.gettempdir()) / "hetsched-ray")
        spec: dict[str, Any] = {
            "key": key,
            "job_id": job_id,
            "task": task,
            "run": run,
            "node": placement.node,
            "command": [str(a) for a in command],
            "env": overlay,
            "workdir": workdir,
            "node_dir": str(node_dir / self.namespace),
            "run_as": [run_as.uid, run_as.gid] if run_as is not None else None,
        }
        try:
            actor = self._create(key, node_id, spec)
        except Exception as exc:
            raise RayStartError(f"Ray would not start the task: {_short(exc)}") from exc
        now = time.time()
        handle = RayTaskHandle(job_id, task, run, placement.node, node_id, actor)
        handle.deadline = now + max_runtime_s if max_runtime_s else None
        self.handles[key] = handle
        self._call(handle)
        return handle

    def _create(self, key: str, node_id: str, spec: dict[str, Any]) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self._runner is None:
            import ray

            self._runner = ray.remote(TaskRunner)
        return self._runner.options(
            name=key,
            namespace=self.namespace,
            lifetime="detached",
            num_cpus=0,
            num_gpus=0,
            memory=0,
            max_restarts=0,
            max_task_retries=0,
            max_concurrency=_RUNNER_THREADS,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(spec)

    def _write_header(self, job_id: str, task: int, run: int, node: str, node_id: str) -> None:
        directory = self.job_dir(job_id)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        header = f"--- hetsched: run {run} of task {task} on {node} ---\n".encode()
        bases = {}
        for stream in ("stdout", "stderr"):
            fd = open_task_log(self.log_path(job_id, task, stream))
            try:
                if stream == "stdout":
                    os.write(fd, header)
                bases[stream] = os.fstat(fd).st_size
            finally:
                os.close(fd)
        bases_path = self._bases_path(job_id, task, run)
        partial = bases_path.with_suffix(".tmp")
        partial.write_text(json.dumps({**bases, "node": node, "node_id": node_id}))
        partial.replace(bases_path)

    # -- adopt after a restart ----------------------------------------------------------------

    def adopt(
        self,
        job_id: str,
        task: int,
        run: int,
        pid: int,
        pid_started: float,
        deadline: float | None,
    ) -> RayTaskHandle | None:
        """Watch the task's actor started by an earlier control plane, if it is still there
        (found by its key; ``pid`` is not needed and not checked). Its output resumes where
        the log files stop."""
        key = task_key(job_id, task, run)
        actor = self._actor(key)
        if actor is None:
            return None
        status = self._status_of({key: actor}).get(key)
        if status is None:
            return None
        bases = self._bases(job_id, task, run)
        handle = RayTaskHandle(
            job_id,
            task,
            run,
            str(status["node"]),
            str(bases.get("node_id", "")),
            actor,
            int(status["pid"]),
            float(status["pid_started"]),
        )
        handle.deadline = deadline
        for index, stream in enumerate(("stdout", "stderr")):
            size = _size(self.log_path(job_id, task, stream))
            handle.received[index] = max(0, size - int(bases.get(stream, size)))
        self.handles[key] = handle
        self._call(handle)
        return handle

    def recorded_exit(self, job_id: str, task: int, run: int) -> int | None:
        """The exit code of a task that ended while nobody watched, if its actor still holds
        it (an exit not yet reported)."""
        key = task_key(job_id, task, run)
        actor = self._actor(key)
        if actor is None:
            return None
        status = self._status_of({key: actor}).get(key)
        if status is None or not status["ended"] or status["exit"] is None:
            return None
        return int(status["exit"])

    def find_leaders(self) -> dict[str, tuple[int, float]]:
        """Task key -> (pid, start time) of each task actor of this instance that answers
        (its process running or ended but not yet reported)."""
        actors = {key: a for key in self._names() if (a := self._actor(key)) is not None}
        return {
            key: (int(s["pid"]), float(s["pid_started"]))
            for key, s in self._status_of(actors).items()
        }

    def sweep(self, live_keys: Iterable[str]) -> list[str]:
        """Kill the task actors of this instance that no live task accounts for (their
        supervisors then kill their process groups); returns their keys."""
        import ray

        keep = set(live_keys) | set(self.handles)
        strays = {key: a for key in self._names() if key not in keep and (a := self._actor(key))}
        # retire first: their files on the nodes go too
        calls = [actor.retire.remote() for actor in strays.values()]
        if calls:
            ray.wait(calls, num_returns=len(calls), timeout=_LOOKUP_TIMEOUT_S)
        for actor in strays.values():
            _kill_actor(actor)
        return sorted(strays)

    def _names(self) -> list[str]:
        import ray

        listed: list[dict[str, str]] = ray.util.list_named_actors(all_namespaces=True)
        return [a["name"] for a in listed if a.get("namespace") == self.namespace]

    def _actor(self, key: str) -> Any:
        import ray

        try:
            return ray.get_actor(key, namespace=self.namespace)
        except ValueError:
            return None

    def _status_of(self, actors: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """Each actor's status; those that do not answer in time are left out."""
        import ray

        calls = {actor.status.remote(): key for key, actor in actors.items()}
        if not calls:
            return {}
        ready, _ = ray.wait(list(calls), num_returns=len(calls), timeout=_LOOKUP_TIMEOUT_S)
        out: dict[str, dict[str, Any]] = {}
        for ref in ready:
            try:
                out[calls[ref]] = ray.get(ref)
            except Exception as exc:
                log.info("task %s: its actor does not answer: %s", calls[ref], _short(exc))
        return out

    def _bases(self, job_id: str, task: int, run: int) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self._bases_path(job_id, task, run).read_text())
        except (OSError, ValueError):
            return {}
        return data

    # -- stop -----------------------------------------------------------------------------

    def stop(
        self,
        key: str,
        grace_s: float | None = None,
        now: float | None = None,
        notice_s: float = 0.0,
        notice_signal: str = "SIGUSR1",
    ) -> bool:
        """SIGTERM the task's group now and SIGKILL it after the grace period. Ray tasks get
        no checkpoint notice (``notice_s`` and ``notice_signal`` are ignored): the
        checkpoint protocol needs the service home on the task's machine, so it is the local
        executor's alone (docs/checkpointing.md)."""
        del notice_s, notice_signal
        handle = self.handles.get(key)
        if handle is None:
            return False
        handle.stopping = True
        self._terminate(handle, grace_s, now)
        return True

    def kill(self, key: str) -> bool:
        """SIGKILL the task's group now (``ray.kill`` of its actor if it does not confirm)."""
        handle = self.handles.get(key)
        if handle is None:
            return False
        self._sigkill(handle, time.time())
        return True

    def _terminate(self, handle: RayTaskHandle, grace_s: float | None, now: float | None) -> None:
        now = time.time() if now is None else now
        grace = self.kill_grace_s if grace_s is None else grace_s
        if handle.kill_at is None:
            handle.actor.signal.remote(int(signal.SIGTERM))
            handle.kill_at = now + grace
        else:
            handle.kill_at = min(handle.kill_at, now + grace)

    def _sigkill(self, handle: RayTaskHandle, now: float) -> None:
        if handle.force_at is None:
            handle.actor.signal.remote(int(signal.SIGKILL))
            handle.force_at = now + self.force_after_s

    # -- watch ----------------------------------------------------------------------------

    @property
    def exits_reported(self) -> bool:
        """False: a task's end is learnt from its actor's answer to a poll, so the driver
        polls while tasks run."""
        return False

    def next_due(self) -> float | None:
        """The earliest time :meth:`poll` has work besides reporting exits: a SIGKILL after a
        grace, ``ray.kill`` of an actor that did not confirm, a maximum runtime, a task lost
        with its node to report, or the actors of reported exits to retire (at once)."""
        times: list[float] = []
        if self._reported:
            times.append(time.time())
        elif self._retiring:
            times.append(time.time() + _RETIRE_CHECK_S)  # asked; its answer comes soon
        for h in self.handles.values():
            times += [t for t in (h.kill_at, h.force_at) if t is not None]
            if h.deadline is not None and not (h.stopping or h.timed_out):
                times.append(h.deadline)
            if h.lost_at is not None:
                times.append(h.lost_at + self.node_loss_wait_s)
        return min(times, default=None)

    def poll(self, now: float | None = None) -> list[TaskExit]:
        """Tasks that ended since the last poll (their output all in the log files); appends
        output, escalates pending kills, enforces maximum runtimes, and retires the actors
        of the exits the previous poll reported."""
        import ray

        now = time.time() if now is None else now
        self._retire(now)
        calls = {h.call: h for h in self.handles.values() if h.call is not None}
        ready: list[Any] = []
        if calls:
            ready, _ = ray.wait(list(calls), num_returns=len(calls), timeout=0)
        exits: list[TaskExit] = []
        lost: list[tuple[RayTaskHandle, BaseException]] = []
        for ref in ready:
            handle = calls[ref]
            handle.call = None
            try:
                reply = ray.get(ref)
            except ray.exceptions.ActorUnavailableError:
                # its node may be on the way out; Ray says so for sure soon
                handle.next_call = now + 1.0
                continue
            except Exception as exc:
                lost.append((handle, exc))
                continue
            exit_ = self._answer(handle, reply)
            if exit_ is not None:
                exits.append(exit_)
        exits += self._lost(lost, now)
        exits += self._node_losses(now)
        ended = {task_key(e.job_id, e.task, e.run) for e in exits}
        for handle in self.handles.values():
            if handle.key not in ended:
                self._watch(handle, now)
        for exit_ in exits:
            handle = self.handles.pop(task_key(exit_.job_id, exit_.task, exit_.run))
            self._reported.append(handle.actor)
        return exits

    def _answer(self, handle: RayTaskHandle, reply: Mapping[str, Any]) -> TaskExit | None:
        handle.pid = int(reply["pid"]) or handle.pid
        handle.pid_started = float(reply["pid_started"]) or handle.pid_started
        for index, stream in enumerate(("stdout", "stderr")):
            data: bytes = reply["out" if index == 0 else "err"]
            if data:
                _append(self.log_path(handle.job_id, handle.task, stream), data, handle.key)
                handle.received[index] += len(data)
        if reply["error"]:
            return TaskExit(
                handle.job_id, handle.task, handle.run, None, handle.stopping, str(reply["error"])
            )
        if not reply["ended"]:
            self._call(handle)
            return None
        code = reply["exit"]
        if handle.timed_out:
            reason = "exceeded its maximum runtime"
        elif code is None:
            reason = "exit status unknown"
        elif code < 0:
            reason = f"killed by signal {-code}"
        elif code > 128:
            reason = f"exit code {code} (signal {code - 128})"
        else:
            reason = f"exit code {code}"
        return TaskExit(handle.job_id, handle.task, handle.run, code, handle.stopping, reason)

    def _lost(self, lost: list[tuple[RayTaskHandle, BaseException]], now: float) -> list[TaskExit]:
        """Exits for tasks whose actor died with no word: killed through Ray after the grace,
        lost with their node (held back: :meth:`_node_losses`), or never started."""
        if not lost:
            return []
        table = {str(n["NodeID"]): n for n in _api.nodes()}
        exits = []
        for handle, exc in lost:
            node_dead = False
            entry = table.get(handle.node_id)
            if handle.killed_by_ray:
                code: int | None = -signal.SIGKILL
                reason = "killed by signal 9 (its Ray actor was killed after the grace)"
                if handle.timed_out:
                    reason = "exceeded its maximum runtime"
            elif entry is None or not entry["Alive"]:
                code = None
                message = str((entry or {}).get("DeathReasonMessage") or "")
                reason = f"lost: node {handle.node} died" + (f" ({message})" if message else "")
                node_dead = True
            elif handle.pid == 0:
                code = None
                reason = f"cannot start on node {handle.node}: {_short(exc)}"
            else:
                code = None
                reason = f"lost: its Ray actor on node {handle.node} died: {_short(exc)}"
            log.warning("task %s: %s", handle.key, reason)
            exit_ = TaskExit(handle.job_id, handle.task, handle.run, code, handle.stopping, reason)
            if node_dead:
                handle.lost_at, handle.lost_exit = now, exit_
            else:
                exits.append(exit_)
        return exits

    def _node_losses(self, now: float) -> list[TaskExit]:
        """The exits of tasks lost with their node that the driver has since asked to stop,
        or that have waited ``node_loss_wait_s``."""
        exits = []
        for handle in self.handles.values():
            if handle.lost_at is None or handle.lost_exit is None:
                continue
            if handle.stopping or now - handle.lost_at >= self.node_loss_wait_s:
                exits.append(replace(handle.lost_exit, stopped=handle.stopping))
        return exits

    def _watch(self, handle: RayTaskHandle, now: float) -> None:
        if handle.lost_at is not None:
            return  # its actor is gone with its node: nothing to ask or signal
        if handle.call is None and now >= handle.next_call:
            self._call(handle)
        if handle.force_at is not None and now >= handle.force_at and not handle.killed_by_ray:
            handle.killed_by_ray = True
            _kill_actor(handle.actor)
        elif handle.kill_at is not None and now >= handle.kill_at:
            self._sigkill(handle, now)
        elif (
            handle.deadline is not None
            and now >= handle.deadline
            and not (handle.stopping or handle.timed_out)
        ):
            handle.timed_out = True
            self._terminate(handle, None, now)

    def _call(self, handle: RayTaskHandle) -> None:
        handle.call = handle.actor.sync.remote(
            handle.received[0],
            handle.received[1],
            self.sync_wait_s,
            self.chunk_bytes,
            handle.pid != 0,
        )

    def _retire(self, now: float) -> None:
        """Retire the actors of the exits the previous poll reported (the driver has recorded
        them since), and kill those whose files are gone."""
        import ray

        for actor in self._reported:
            self._retiring[actor.retire.remote()] = (actor, now)
        self._reported = []
        if not self._retiring:
            return
        ready, _ = ray.wait(list(self._retiring), num_returns=len(self._retiring), timeout=0)
        for ref, (actor, asked) in list(self._retiring.items()):
            if ref in ready or now - asked > 30:
                _kill_actor(actor)
                del self._retiring[ref]

    def shutdown(self) -> None:
        """Forget the tasks without stopping them: a restart adopts them again. The actors
        whose exits an earlier poll reported and the next poll retired are finished off; those
        of the last poll's exits are left as they are, since the driver may not have recorded
        those exits (a turn that failed before its commit): the next control plane learns them
        again (:meth:`adopt`) or sweeps them (:meth:`sweep`)."""
        import ray

        self._reported = []
        if self._retiring:
            ray.wait(list(self._retiring), num_returns=len(self._retiring), timeout=5)
        for actor, _asked in self._retiring.values():
            _kill_actor(actor)
        self._retiring.clear()
        self.handles.clear()


def _append(path: Path, data: bytes, key: str) -> None:
    """Append a task's output to its log through the local executor's opener (a task shares
    the machine with the control plane and can plant a link under its log's name). The task
    can also make that fail (a directory under the name, its job directory removed): its
    output is dropped then, and the other tasks' answers are still taken."""
    try:
        fd = open_task_log(path)
    except OSError as exc:
        log.warning("task %s: output dropped, its log cannot be opened: %s", key, exc)
        return
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def _kill_actor(actor: Any) -> None:
    import ray

    with contextlib.suppress(Exception):
        ray.kill(actor, no_restart=True)


def _short(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__


if TYPE_CHECKING:
    from hetsched.agent.protocol import ProcessExecutor

    def _conforms(executor: RayExecutor) -> ProcessExecutor:
        return executor
