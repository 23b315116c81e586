"""The Ray task executor: runs bound tasks on the Ray nodes hetsched chose, with the surface
and the meaning of the local process executor (:mod:`hetsched.agent.executor`).

Each Ray node has one node agent (:mod:`hetsched.ray.agent`), a detached actor pinned to it
running the local executor there; this is their control plane's side (:mod:`hetsched.ray.link`).

Contracts (those of the local executor, and where they differ):
- It implements the executor protocol (:mod:`hetsched.drivers.executor`) with the
  capabilities :class:`~hetsched.drivers.executor.Polled`,
  :class:`~hetsched.drivers.executor.Adopts`,
  :class:`~hetsched.drivers.executor.GivesNotice` (the agent's local executor sends the
  notice signal) and :class:`~hetsched.drivers.executor.ProcessTasks`; not ``Fences`` (a
  lease file is on the control plane's machine) or ``KillsByPid`` (a pid means nothing off
  its node).
- Batched per turn: ``start``, ``stop`` and ``kill`` collect their work per agent and the
  next :meth:`RayExecutor.poll` sends it, one call per agent for all of its Starts (one for
  its Stops, one for its kills); ``next_due`` says so at once. A task's handle exists from
  ``start`` on; its pid is 0 until its agent has said.
- Exits, pids and output come through one long poll per agent, in flight at all times
  while the agent has tasks (or watches its node's devices, ``discovery_of``: a changed
  answer goes to ``on_devices``); its answer calls ``on_exit`` (the driver polls then).
- The task's environment, process group, exit codes, SIGTERM then SIGKILL after the grace,
  maximum runtime: the local executor's, run by the agent on the node.
- Logs: the output streams back into ``<home>/jobs/<id>/task-<n>.out|.err`` (0600, each run
  after its header line), the files the API serves and ``hetsched logs -f`` follows; an
  exit is reported only once all the output before it is in those files. Where each run's
  output starts in them is recorded (``.ray.json``), so a control plane that restarts
  resumes the stream where its files stop: nothing lost, nothing twice.
- A task whose node died is reported with ``exit_code`` None and a reason that names the
  node: a lost task. It is reported only once the driver has asked it to stop (the core's
  answer to the node's removal, which the inventory reports) or ``node_loss_wait_s`` after
  Ray called the node dead, whichever comes first: a task exit reported before the node's
  removal would read as the task's own failure, and the job would not be requeued.
- Exactly once: an exit is reported by one :meth:`poll` and acknowledged to its agent by the
  next one, so the driver must record what a poll returned before it polls again. A control
  plane that crashes in between finds the task again (:meth:`find_leaders`, :meth:`adopt`)
  and learns the exit once more; one that had recorded it sweeps it away (:meth:`sweep`).
- Driven by one thread; not thread-safe. It needs a connected Ray driver
  (:func:`hetsched.ray._api.connect`).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetsched.agent.guard import Alert, Watched
from hetsched.agent.taskenv import job_folder, task_log
from hetsched.cluster.placement import Placement
from hetsched.drivers.executor import Exit, Start, Stop
from hetsched.framework.profile import GuardSpec
from hetsched.keys import TaskKey
from hetsched.ray import _api
from hetsched.ray.adoption import Adoption
from hetsched.ray.handle import (
    RayStartError,
    RayTaskHandle,
    append_output,
    lost_reason,
    short,
    write_bases,
)
from hetsched.ray.link import AgentLink, create_agent

__all__ = ["RayExecutor", "RayStartError", "RayTaskHandle"]

log = logging.getLogger(__name__)

#: how long to wait before asking an agent again after it did not answer
_RETRY_S = 0.5
#: a long poll this much past its wait is overdue: the node is looked at
_LATE_S = 1.0
#: how often Ray's node table is read while an agent is suspect
_CHECK_S = 1.0


@dataclass
class RayExecutor(Adoption):
    home: Path
    #: marks this control plane's tasks (the Ray namespace is ``hetsched-<instance>``)
    instance: str
    #: the Ray node id of a hetsched node (``RayInventory.node_id``)
    node_id_of: Callable[[str], str | None]
    kill_grace_s: float = 5.0
    #: where the agents keep task files on the nodes (default: ``<tmp>/hetsched-ray``)
    node_dir: str | None = None
    #: how long an agent holds a long poll open
    sync_wait_s: float = 2.0
    #: the most bytes per stream and task one answer carries
    chunk_bytes: int = 1 << 20
    #: how long a task lost with its node waits for the driver's stop before it is reported
    node_loss_wait_s: float = 10.0
    handles: dict[str, RayTaskHandle] = field(default_factory=dict)
    #: the driver's wake-up: called (from Ray's thread) when an agent answers
    on_exit: Callable[[], None] | None = None
    #: Ray node id -> its agent
    links: dict[str, AgentLink] = field(default_factory=dict)
    #: exits known without an answer: starts Ray refused, stops of tasks not running
    _known: list[Exit] = field(default_factory=list)
    #: task key -> Ray node id, of the tasks the last find_leaders found
    _found: dict[str, str] = field(default_factory=dict)
    #: when Ray's node table was last read for a suspect agent
    _checked_at: float = 0.0
    #: nodes that joined, whose agents the next poll creates
    _joined: deque[str] = field(default_factory=deque)
    #: the overcommit guard's alerts from the agents, not yet handed out
    _alerts: list[Alert] = field(default_factory=list)
    #: the discovery backends of a Ray node's device watch (None: no watch there); None:
    #: no agent watches its node's devices
    discovery_of: Callable[[str], list[str] | None] | None = None
    #: seconds between two device scans by an agent
    watch_interval_s: float = 2.0
    #: told (from the driver's thread, in :meth:`poll`) of a node's changed device answer:
    #: (Ray node id, devices as plain data)
    on_devices: Callable[[str, list[dict[str, Any]]], None] | None = None

    @property
    def namespace(self) -> str:
        return f"hetsched-{self.instance}"

    def job_dir(self, job_id: str) -> Path:
        return job_folder(self.home, job_id)

    def log_path(self, job_id: str, task: int, stream: str) -> Path:
        return task_log(self.home, job_id, task, stream)

    def agent_home(self, node_id: str) -> str:
        """The agent's folder on its node (one per node: agents may share a machine)."""
        base = Path(self.node_dir or Path(tempfile.gettempdir()) / "hetsched-ray")
        return str(base / self.namespace / node_id[:16])

    def link(self, node_id: str) -> AgentLink:
        """The agent of Ray node ``node_id``, created if it is not running."""
        link = self.links.get(node_id)
        if link is None or link.dead:
            home = self.agent_home(node_id)
            discovery = None if self.discovery_of is None else self.discovery_of(node_id)
            watch = (discovery, self.watch_interval_s)
            actor = create_agent(
                node_id, self.namespace, self.instance, home, self.kill_grace_s, *watch
            )
            link = self.links[node_id] = AgentLink(node_id, actor)
        return link

    def joined(self, nodes: Iterable[str]) -> None:
        """Hetsched nodes that joined the cluster: their agents are created by the next poll
        (or found, where they run already), so that the first task there does not wait for
        one. Callable from any thread."""
        self._joined.extend(nodes)

    def _prepare(self) -> None:
        while self._joined:
            node_id = self.node_id_of(self._joined.popleft())
            if node_id is not None and node_id not in self.links:
                try:
                    self.link(node_id)
                except Exception as exc:
                    log.warning("no agent for node %s yet: %s", node_id, short(exc))

    # -- start ----------------------------------------------------------------------------

    def start(self, tasks: Sequence[Start], now: float) -> None:
        """Queue each task for its node's agent (sent by the next poll). One that cannot be
        placed is reported by the next poll (``cannot start: ...``)."""
        for start in tasks:
            key = start.key
            try:
                self._queue(start)
            except OSError as exc:
                reason = f"cannot start: {exc}"
                self._known.append(Exit.of(key.job, key.task, key.run, None, False, reason))

    def _queue(self, start: Start) -> RayTaskHandle:
        """A federation's lease (``fence``) is a file on the control plane's machine that no
        Ray node can read: such a task is refused. ``run_as`` needs the node's Ray worker to
        run as root."""
        launch, node = start.launch, start.placement.node
        if launch is None:
            raise RayStartError("no command to run")
        if launch.fence is not None:
            raise RayStartError("a task fenced by a federation's lease needs the local executor")
        node_id = self.node_id_of(node)
        if node_id is None:
            raise RayStartError(f"node {node} is not in the Ray cluster")
        try:
            link = self.link(node_id)
        except Exception as exc:
            raise RayStartError(f"Ray would not start the node's agent: {short(exc)}") from exc
        key = start.key
        write_bases(self.home, key, node, node_id)
        handle = RayTaskHandle(key.job, key.task, key.run, node, node_id)
        self.handles[str(key)] = handle
        link.keys.add(str(key))
        link.starts.append(start)
        return handle

    # -- stop -----------------------------------------------------------------------------

    def stop(self, tasks: Sequence[Stop], now: float) -> None:
        """Stop each task as the local executor does, on its node (sent by the next poll):
        the notice signal ``notice_s`` ahead where the Stop has one, SIGTERM, SIGKILL after
        the grace. A task not running here is reported stopped by the next poll."""
        for stop in tasks:
            key = stop.key
            handle = self.handles.get(str(key))
            if handle is None:
                reason = "stopped before it ran"
                self._known.append(Exit.of(key.job, key.task, key.run, None, True, reason))
                continue
            if stop.notice_s > 0 and not handle.stopping:
                handle.notice_until = now + stop.notice_s
            elif handle.notice_until is not None:
                # a second stop shortens the notice (0: ends it), never lengthens it
                handle.notice_until = min(handle.notice_until, now + stop.notice_s)
            handle.stopping = True
            link = self.links.get(handle.node_id)
            if link is not None and not link.dead:
                link.stops.append(stop)

    def stop_one(self, key: str, grace_s: float | None = None, now: float | None = None) -> bool:
        """Stop one task (``grace_s`` None: ``kill_grace_s``); False when none is watched."""
        handle = self.handles.get(key)
        if handle is None:
            return False
        grace = self.kill_grace_s if grace_s is None else grace_s
        stop = Stop(TaskKey.parse(key), Placement(handle.node, 0, 0), 0.0, grace, "stopped")
        self.stop([stop], time.time() if now is None else now)
        return True

    def in_notice(self, key: TaskKey) -> bool:
        """Whether the task was told of its stop and its notice is not over (the agent's
        local executor sends the notice signal, and SIGTERM when the notice ends)."""
        handle = self.handles.get(str(key))
        until = handle.notice_until if handle is not None else None
        return until is not None and time.time() < until

    def kill(self, key: str) -> bool:
        """SIGKILL the task's group now (sent by the next poll)."""
        handle = self.handles.get(key)
        link = self.links.get(handle.node_id) if handle is not None else None
        if handle is None or link is None:
            return False
        link.kills.append(key)
        return True

    def guard_nodes(self, spec: GuardSpec, tasks: Sequence[Watched]) -> list[Alert]:
        """A round of the overcommit guard, run by each node's agent over its tasks (sent
        by the next poll): it measures them there and kills what the guard names. Returns
        the alerts the agents raised since the last call."""
        by_node: dict[str, list[dict[str, Any]]] = {}
        for task in tasks:
            if (handle := self.handles.get(task.key)) is not None:
                by_node.setdefault(handle.node_id, []).append(asdict(task))
        for node_id, rows in by_node.items():
            if (link := self.links.get(node_id)) is not None and not link.dead:
                link.guard = (spec.model_dump(), rows)
        alerts, self._alerts = self._alerts, []
        return alerts

    # -- watch ----------------------------------------------------------------------------

    @property
    def exits_reported(self) -> bool:
        """True once the driver set ``on_exit``: every agent's answer calls it."""
        return self.on_exit is not None

    def next_due(self) -> float | None:
        """The earliest time :meth:`poll` has work besides answers to report: work to send
        (at once), an agent to ask again, a task lost with its node to report."""
        now = time.time()
        times: list[float] = [now] if self._known or self._joined else []
        for link in self.links.values():
            if link.pending:
                times.append(now)
            elif link.call is None and self._wanted(link):
                times.append(max(now, link.next_call))
            if self._suspect(link, now):
                times.append(max(now, self._checked_at + _CHECK_S))
            elif link.call is not None and not link.dead:
                times.append(link.called_at + self.sync_wait_s + _LATE_S)
        times += [h.lost_at + self.node_loss_wait_s for h in self.handles.values() if h.lost_at]
        return min(times, default=None)

    def poll(self, now: float | None = None) -> list[Exit]:
        """Send the turn's work, take the agents' answers (output into the log files, pids,
        exits), and report the exits learnt since the last poll."""
        import ray

        now = time.time() if now is None else now
        self._prepare()
        for link in self.links.values():
            link.acks += link.reported
            link.reported = []
            if link.pending and not link.dead:
                link.flush()
        calls = {link.call: link for link in self.links.values() if link.call is not None}
        ready: list[Any] = []
        if calls:
            ready, _ = ray.wait(list(calls), num_returns=len(calls), timeout=0)
        exits: list[Exit] = []
        for ref in ready:
            link = calls[ref]
            link.call = None
            try:
                reply = ray.get(ref)
            except Exception as exc:
                self._unanswered(link, exc, now)
                continue
            link.failing_since = None
            exits += self._answer(link, reply)
        self._check(now)
        exits += self._node_losses(now)
        for exit_ in exits:
            handle = self.handles.pop(str(exit_.key))
            owner = self.links.get(handle.node_id)
            if owner is not None:
                owner.keys.discard(handle.key)
                owner.reported.append(handle.key)
        for link in self.links.values():
            if link.call is None and now >= link.next_call and self._wanted(link):
                self._ask(link, now)
        known, self._known = self._known, []
        return known + exits

    def _wanted(self, link: AgentLink) -> bool:
        """Whether its long poll should be in flight: tasks, acks, or a device watch."""
        watching = self.discovery_of is not None
        return not link.dead and bool(link.keys or link.acks or watching)

    def _answer(self, link: AgentLink, reply: Mapping[str, Any]) -> list[Exit]:
        self._alerts += [Alert(**alert) for alert in reply.get("alerts", ())]
        devices = reply.get("devices")
        if devices is not None:
            link.devices_seen = int(devices[0])
            if self.on_devices is not None:
                self.on_devices(link.node_id, list(devices[1]))
        for key, (pid, started) in reply["pids"].items():
            handle = self.handles.get(key)
            if handle is not None:
                handle.pid, handle.pid_started = int(pid), float(started)
        for key, chunks in reply["out"].items():
            handle = self.handles.get(key)
            if handle is None:
                continue
            for index, stream in enumerate(("stdout", "stderr")):
                data: bytes = chunks[index]
                if data:
                    append_output(self.log_path(handle.job_id, handle.task, stream), data, key)
                    handle.received[index] += len(data)
        exits = []
        for exit_ in reply["exits"]:
            handle = self.handles.get(str(exit_.key))
            if handle is not None and handle.node_id == link.node_id:
                exits.append(exit_._replace(stopped=exit_.stopped or handle.stopping))
        return exits

    def _unanswered(self, link: AgentLink, exc: Exception, now: float) -> None:
        """An agent's long poll failed: its node died, or the agent is being restarted or is
        unreachable for a while; ask again soon, and look at the node (:meth:`_check`)."""
        link.next_call = now + _RETRY_S
        if link.failing_since is None:
            link.failing_since = now
            log.warning("the agent of node %s does not answer: %s", link.node_id, short(exc))

    def _suspect(self, link: AgentLink, now: float) -> bool:
        """Whether the agent failed to answer, or holds its long poll too long."""
        overdue = link.call is not None and now > link.called_at + self.sync_wait_s + _LATE_S
        return not link.dead and (link.failing_since is not None or overdue)

    def _check(self, now: float) -> None:
        """Once a second while an agent is suspect: is its node alive? Its tasks are lost
        when Ray says the node is dead."""
        suspects = [link for link in self.links.values() if self._suspect(link, now)]
        if not suspects or now < self._checked_at + _CHECK_S:
            return
        self._checked_at = now
        table = {str(n["NodeID"]): n for n in _api.nodes()}
        for link in suspects:
            entry = table.get(link.node_id)
            if entry is not None and entry["Alive"]:
                continue
            link.dead, link.call = True, None
            for key in sorted(link.keys):
                handle = self.handles[key]
                reason = lost_reason(handle.node, entry)
                log.warning("task %s: %s", key, reason)
                handle.lost_at, handle.lost_exit = now, handle.exit(None, reason)

    def _node_losses(self, now: float) -> list[Exit]:
        """The exits of tasks lost with their node that the driver has since asked to stop,
        or that have waited ``node_loss_wait_s``."""
        exits = []
        for handle in [h for h in self.handles.values() if h.lost_at is not None]:
            assert handle.lost_at is not None and handle.lost_exit is not None
            if handle.stopping or now - handle.lost_at >= self.node_loss_wait_s:
                exits.append(handle.lost_exit._replace(stopped=handle.stopping))
        return exits

    def _ask(self, link: AgentLink, now: float) -> None:
        """The agent's next long poll, carrying the acknowledgements of reported exits."""
        watched = {
            key: (h.received[0], h.received[1], h.pid != 0)
            for key in link.keys
            if (h := self.handles.get(key)) is not None
        }
        link.call = link.actor.sync.remote(
            watched, link.acks, self.sync_wait_s, self.chunk_bytes, link.devices_seen
        )
        link.acks, link.called_at = [], now
        wake = self.on_exit
        if wake is not None:
            link.call.future().add_done_callback(lambda _done: wake())

    def shutdown(self) -> None:
        """Forget the tasks without stopping them: a restart adopts them again. Work queued
        for the agents is sent first; the exits of the last poll are not acknowledged (the
        driver may not have recorded them: the next control plane learns them again)."""
        for link in self.links.values():
            if link.pending and not link.dead:
                link.flush()
        self.links.clear()
        self.handles.clear()
        self._known.clear()
        self._found.clear()


if TYPE_CHECKING:
    from hetsched.drivers.executor import GivesNotice, ProcessExecutor

    def _conforms(executor: RayExecutor) -> tuple[ProcessExecutor, GivesNotice]:
        return executor, executor
