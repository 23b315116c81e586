"""The Ray task executor: runs bound tasks on the Ray nodes hetsched chose, with the surface
and the meaning of the local process executor (:mod:`hetsched.agent.executor`).

Each task is a :class:`~hetsched.ray.runner.TaskRunner` actor: named by its task key
(``job/task#run``) in the namespace ``hetsched-<instance>``, detached (it outlives the
control plane's driver), pinned to the chosen node by hard node affinity, asking Ray for no
CPU, GPU or memory (hetsched did the accounting and chose the devices; Ray sets nothing).

Contracts (those of the local executor, and where they differ):
- It implements the executor protocol (:mod:`hetsched.drivers.executor`) with the
  capabilities :class:`~hetsched.drivers.executor.Polled` (it learns of exits only by
  polling: ``exits_reported`` is False), :class:`~hetsched.drivers.executor.Adopts` and
  :class:`~hetsched.drivers.executor.ProcessTasks`; not ``Fences`` (a lease file is on the
  control plane's machine), ``GivesNotice`` or ``KillsByPid`` (a pid means nothing off its
  node).
- ``start`` returns at once; the process starts when Ray has placed the actor (its pid is
  known from the first answer, ``handle.pid`` is 0 until then). A task Ray refuses
  (:class:`RayStartError`, an ``OSError``, from :meth:`RayExecutor.spawn`) is reported by
  the next poll as one that could not start.
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

import logging
import signal
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetsched.agent.taskenv import (
    device_env,
    identity_env,
    job_folder,
    task_key,
    task_log,
)
from hetsched.cluster.placement import Placement
from hetsched.drivers.executor import Exit, Launch, Start, Stop
from hetsched.keys import TaskKey
from hetsched.ray import _api
from hetsched.ray.actors import LOOKUP_TIMEOUT_S, actor_named, actor_names, create_actor, statuses
from hetsched.ray.handle import (
    RayStartError,
    RayTaskHandle,
    append_output,
    kill_actor,
    lost_reason,
    read_bases,
    reply_exit,
    short,
    size_of,
    write_header,
)

__all__ = ["RayExecutor", "RayStartError", "RayTaskHandle"]

log = logging.getLogger(__name__)

#: how often the actors being retired are looked at while nothing else is due
_RETIRE_CHECK_S = 0.5


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
    #: exits known without an answer: starts Ray refused, stops of tasks not running
    _known: list[Exit] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return f"hetsched-{self.instance}"

    def job_dir(self, job_id: str) -> Path:
        return job_folder(self.home, job_id)

    def log_path(self, job_id: str, task: int, stream: str) -> Path:
        return task_log(self.home, job_id, task, stream)

    # -- start ----------------------------------------------------------------------------

    def start(self, tasks: Sequence[Start], now: float) -> None:
        """Create each task's actor on its node. One that Ray will not take is reported by
        the next poll (``cannot start: ...``)."""
        for start in tasks:
            key = start.key
            try:
                if start.launch is None:
                    raise RayStartError("no command to run")
                self.spawn(key, start.placement, start.launch)
            except OSError as exc:
                reason = f"cannot start: {exc}"
                self._known.append(Exit.of(key.job, key.task, key.run, None, False, reason))

    def spawn(self, key: TaskKey, placement: Placement, launch: Launch) -> RayTaskHandle:
        """Create one task's actor; raises RayStartError if Ray will not. ``run_as`` needs
        the node's Ray worker to run as root. A federation's lease (``fence``) is a file on
        the control plane's machine that no Ray node can read: such a task is refused."""
        if launch.fence is not None:
            raise RayStartError("a task fenced by a federation's lease needs the local executor")
        node_id = self.node_id_of(placement.node)
        if node_id is None:
            raise RayStartError(f"node {placement.node} is not in the Ray cluster")
        job_id, task, run = key
        write_header(self.home, key, placement.node, node_id)
        overlay = dict(launch.env)
        overlay.update(device_env(launch.devices))
        overlay.update(identity_env(job_id, task, run, placement.node, self.instance))
        node_dir = Path(self.node_dir or Path(tempfile.gettempdir()) / "hetsched-ray")
        run_as = launch.run_as
        spec: dict[str, Any] = {
            "key": str(key),
            "job_id": job_id,
            "task": task,
            "run": run,
            "node": placement.node,
            "command": [str(a) for a in launch.command],
            "env": overlay,
            "workdir": launch.workdir,
            "node_dir": str(node_dir / self.namespace),
            "run_as": [run_as.uid, run_as.gid] if run_as is not None else None,
        }
        try:
            actor = create_actor(str(key), self.namespace, node_id, spec)
        except Exception as exc:
            raise RayStartError(f"Ray would not start the task: {short(exc)}") from exc
        handle = RayTaskHandle(job_id, task, run, placement.node, node_id, actor)
        max_runtime_s = launch.max_runtime_s
        handle.deadline = time.time() + max_runtime_s if max_runtime_s else None
        self.handles[str(key)] = handle
        self._call(handle)
        return handle

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
        actor = actor_named(key, self.namespace)
        if actor is None:
            return None
        status = statuses({key: actor}).get(key)
        if status is None:
            return None
        bases = read_bases(self.home, TaskKey(job_id, task, run))
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
            size = size_of(self.log_path(job_id, task, stream))
            handle.received[index] = max(0, size - int(bases.get(stream, size)))
        self.handles[key] = handle
        self._call(handle)
        return handle

    def recorded_exit(self, job_id: str, task: int, run: int) -> int | None:
        """The exit code of a task that ended while nobody watched, if its actor still holds
        it (an exit not yet reported)."""
        key = task_key(job_id, task, run)
        actor = actor_named(key, self.namespace)
        if actor is None:
            return None
        status = statuses({key: actor}).get(key)
        if status is None or not status["ended"] or status["exit"] is None:
            return None
        return int(status["exit"])

    def find_leaders(self) -> dict[str, tuple[int, float]]:
        """Task key -> (pid, start time) of each task actor of this instance that answers
        (its process running or ended but not yet reported)."""
        space = self.namespace
        actors = {k: a for k in actor_names(space) if (a := actor_named(k, space)) is not None}
        return {
            key: (int(s["pid"]), float(s["pid_started"])) for key, s in statuses(actors).items()
        }

    def sweep(self, live_keys: Iterable[str]) -> list[str]:
        """Kill the task actors of this instance that no live task accounts for (their
        supervisors then kill their process groups); returns their keys."""
        import ray

        keep = set(live_keys) | set(self.handles)
        space = self.namespace
        names = [key for key in actor_names(space) if key not in keep]
        strays = {key: a for key in names if (a := actor_named(key, space))}
        # retire first: their files on the nodes go too
        calls = [actor.retire.remote() for actor in strays.values()]
        if calls:
            ray.wait(calls, num_returns=len(calls), timeout=LOOKUP_TIMEOUT_S)
        for actor in strays.values():
            kill_actor(actor)
        return sorted(strays)

    # -- stop -----------------------------------------------------------------------------

    def stop(self, tasks: Sequence[Stop], now: float) -> None:
        """SIGTERM each task's group now and SIGKILL it after the grace period. Ray tasks
        get no checkpoint notice (``notice_s`` is ignored): the checkpoint protocol needs
        the service home on the task's machine, so it is the local executor's alone
        (docs/checkpointing.md). A task not running here is reported stopped by the next
        poll."""
        for stop in tasks:
            key = stop.key
            if not self.stop_one(str(key), stop.grace_s, now):
                reason = "stopped before it ran"
                self._known.append(Exit.of(key.job, key.task, key.run, None, True, reason))

    def stop_one(self, key: str, grace_s: float | None = None, now: float | None = None) -> bool:
        """Stop one task (as :meth:`stop`; ``grace_s`` None: ``kill_grace_s``); False when
        no such task is watched."""
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
        if self._reported or self._known:
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

    def poll(self, now: float | None = None) -> list[Exit]:
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
        exits: list[Exit] = []
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
        ended = {str(e.key) for e in exits}
        for handle in self.handles.values():
            if handle.key not in ended:
                self._watch(handle, now)
        for exit_ in exits:
            handle = self.handles.pop(str(exit_.key))
            self._reported.append(handle.actor)
        known, self._known = self._known, []
        return known + exits

    def _answer(self, handle: RayTaskHandle, reply: Mapping[str, Any]) -> Exit | None:
        handle.pid = int(reply["pid"]) or handle.pid
        handle.pid_started = float(reply["pid_started"]) or handle.pid_started
        for index, stream in enumerate(("stdout", "stderr")):
            data: bytes = reply["out" if index == 0 else "err"]
            if data:
                append_output(self.log_path(handle.job_id, handle.task, stream), data, handle.key)
                handle.received[index] += len(data)
        if not reply["error"] and not reply["ended"]:
            self._call(handle)
            return None
        return reply_exit(handle, reply)

    def _lost(self, lost: list[tuple[RayTaskHandle, BaseException]], now: float) -> list[Exit]:
        """Exits for tasks whose actor died with no word: killed through Ray after the grace,
        lost with their node (held back: :meth:`_node_losses`), or never started."""
        if not lost:
            return []
        table = {str(n["NodeID"]): n for n in _api.nodes()}
        exits = []
        for handle, exc in lost:
            code, reason, node_dead = lost_reason(handle, table.get(handle.node_id), exc)
            log.warning("task %s: %s", handle.key, reason)
            exit_ = handle.exit(code, reason)
            if node_dead:
                handle.lost_at, handle.lost_exit = now, exit_
            else:
                exits.append(exit_)
        return exits

    def _node_losses(self, now: float) -> list[Exit]:
        """The exits of tasks lost with their node that the driver has since asked to stop,
        or that have waited ``node_loss_wait_s``."""
        exits = []
        for handle in self.handles.values():
            if handle.lost_at is None or handle.lost_exit is None:
                continue
            if handle.stopping or now - handle.lost_at >= self.node_loss_wait_s:
                exits.append(handle.lost_exit._replace(stopped=handle.stopping))
        return exits

    def _watch(self, handle: RayTaskHandle, now: float) -> None:
        if handle.lost_at is not None:
            return  # its actor is gone with its node: nothing to ask or signal
        if handle.call is None and now >= handle.next_call:
            self._call(handle)
        if handle.force_at is not None and now >= handle.force_at and not handle.killed_by_ray:
            handle.killed_by_ray = True
            kill_actor(handle.actor)
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
                kill_actor(actor)
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
            kill_actor(actor)
        self._retiring.clear()
        self.handles.clear()
        self._known.clear()


if TYPE_CHECKING:
    from hetsched.drivers.executor import ProcessExecutor

    def _conforms(executor: RayExecutor) -> ProcessExecutor:
        return executor
