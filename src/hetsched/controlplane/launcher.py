"""The launcher: the processes of ``hetsched up``'s tasks.

It starts and signals tasks as a committed :class:`~hetsched.controlplane.planner.TurnPlan`
says, reports their exits, and runs the overcommit guard over them. It knows each job's
spec (command, environment, working directory) and its owner's OS account; it never reads
the scheduling core.

It drives any :class:`~hetsched.drivers.executor.ProcessExecutor`: the local process executor,
or the Ray executor (``hetsched up --executor ray``). It kills by task key, never by pid, so
that it means the same on both; the guard, which measures processes by pid, runs here with
an executor that :class:`~hetsched.drivers.executor.KillsByPid` (the local one), and on the
nodes with one that :class:`GuardsOnNodes` (the Ray executor's agents).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from hetsched.agent.executor import local_indices, task_key
from hetsched.agent.guard import Alert, Guard, Watched
from hetsched.cluster.placement import Placement
from hetsched.controlplane.checkpointing import CheckpointProtocol
from hetsched.controlplane.fencing import Fencing
from hetsched.controlplane.schemas import SubmitSpec
from hetsched.controlplane.taskshape import ADDRESS_LABEL, peers, shape_env
from hetsched.drivers import Exit, GivesNotice, KillsByPid, Launch, RunAs, Start, Stop
from hetsched.drivers.executor import ProcessExecutor
from hetsched.framework.profile import GuardSpec
from hetsched.keys import TaskKey
from hetsched.model.device import Device, Node
from hetsched.model.job import Job
from hetsched.model.workflow import split_element
from hetsched.scheduler import DeviceAdded, Event, NodeAdded

__all__ = ["GuardsOnNodes", "LaunchSpec", "Launched", "Launcher"]

_NO_ENV: Mapping[str, str] = MappingProxyType({})


@runtime_checkable
class GuardsOnNodes(Protocol):
    """An executor whose tasks run on other machines that runs the overcommit guard there
    (the Ray executor: each node's agent measures its tasks and kills what the guard
    names)."""

    def guard_nodes(self, spec: GuardSpec, tasks: Sequence[Watched]) -> list[Alert]:
        """Send a guard round over ``tasks`` to their nodes; the alerts raised there since
        the last call."""
        ...


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """What the launcher keeps of a job's submission until the job ends: what its tasks
    run. A few hundred bytes, where the validated submission (a pydantic model with its
    nested resources) took kilobytes per job: with tens of thousands of jobs waiting the
    difference is a hundred megabytes."""

    command: tuple[str, ...]
    env: Mapping[str, str]
    workdir: str | None
    federation: str | None
    #: group -> what its tasks run instead of ``command`` (a job with groups)
    commands: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, spec: SubmitSpec) -> LaunchSpec:
        env = MappingProxyType(dict(spec.env)) if spec.env else _NO_ENV
        commands = {g.name: tuple(g.command) for g in spec.groups or () if g.command}
        return cls(tuple(spec.command), env, spec.workdir, spec.federation, commands)


@dataclass(frozen=True, slots=True)
class Launched:
    """A task whose process was spawned: what the store records for it."""

    key: TaskKey
    pid: int
    pid_started: float
    at: float


class Launcher:
    """Runs tasks through the process ``executor`` (see the module docstring)."""

    def __init__(
        self,
        executor: ProcessExecutor,
        nodes: Sequence[Node],
        run_as: dict[str, RunAs] | None = None,
        guard: Guard | None = None,
        fencing: Fencing | None = None,
        checkpoints: CheckpointProtocol | None = None,
    ) -> None:
        self.executor = executor
        #: what tasks are told about checkpoints, their notices and reports
        #: (controlplane/checkpointing.py); None: tasks are told nothing
        self.checkpoints = checkpoints
        #: a federated job's tasks run under its federation's lease (controlplane/fencing.py)
        self.fencing = fencing
        self.run_as = run_as
        self.guard = guard
        self.devices: dict[str, Device] = {}
        self.device_indices: dict[str, int] = {}
        #: node -> the address its tasks are reached at (its ``hetsched.io/address`` label)
        self.addresses: dict[str, str] = {}
        self.add_nodes(nodes)
        #: job id -> its job and what its tasks run, while it may run
        self.jobs: dict[str, tuple[Job, LaunchSpec]] = {}
        #: executor key -> why the guard killed that task, until its exit is reported
        self._guard_kills: dict[str, str] = {}
        self._guard_at = 0.0

    def know(self, job: Job, spec: SubmitSpec) -> None:
        """A job whose tasks may be started (submitted, or taken back by recovery)."""
        self.jobs[job.id] = (job, LaunchSpec.of(spec))

    def forget(self, job_id: str) -> None:
        self.jobs.pop(job_id, None)
        if self.checkpoints is not None:
            self.checkpoints.forget(job_id)

    def add_nodes(self, nodes: Sequence[Node]) -> None:
        """Know the devices of nodes that joined (a node's devices keep their ids and indices:
        a node that comes back is known already)."""
        for node in nodes:
            if ADDRESS_LABEL in node.labels:
                self.addresses[node.name] = node.labels[ADDRESS_LABEL]
            fresh = [d for d in node.devices if d.id not in self.devices]
            if not fresh:
                continue
            indices = local_indices(node.devices)
            for device in fresh:
                self.devices[device.id] = device
                self.device_indices[device.id] = indices[device.id]

    def device_event(self, event: Event) -> Event:
        """Note a joining node's devices, or a hot-plugged device (its id, its index among the
        node's devices of its class and vendor), before the core sees it."""
        if isinstance(event, NodeAdded):
            self.add_nodes([event.node])
        elif isinstance(event, DeviceAdded) and event.device.id not in self.devices:
            device = event.device
            prefix = f"{event.node_name}/"
            self.device_indices[device.id] = sum(
                1
                for d in self.devices.values()
                if d.id.startswith(prefix)
                and d.device_class == device.device_class
                and d.vendor.lower() == device.vendor.lower()
            )
            self.devices[device.id] = device
        return event

    # -- what a committed plan says --------------------------------------------------------

    def launch(self, starts: Sequence[Start]) -> tuple[list[Launched], list[Exit]]:
        """Spawn each task; returns those spawned, and the exits of those that could not
        start for want of a spec or an account (the executor reports those it could not
        spawn from its next poll: reported as failed in the next turn)."""
        failed: list[Exit] = []
        ready: list[Start] = []
        addresses, peer_text = peers(starts, self._job, self._host)
        for start in starts:
            key = start.key
            problem, run_as = self._account(key.job)
            if problem is None:
                job = self._job(key.job)
                assert job is not None  # _account found it
                shape = shape_env(start, job, addresses, peer_text)
                ready.append(start._replace(launch=self._launch(start, run_as, shape)))
            else:
                failed.append(Exit.of(key.job, key.task, key.run, None, False, problem))
        self.executor.start(ready, time.time())
        launched: list[Launched] = []
        for start in ready:
            handle = self.executor.handles.get(str(start.key))
            if handle is not None:
                launched.append(Launched(start.key, handle.pid, handle.pid_started, time.time()))
        return launched, failed

    def _known(self, job_id: str) -> tuple[Job, LaunchSpec] | None:
        """The job and what its tasks run; an element of an array the core created runs
        its array's spec, told its index and the array's size."""
        known = self.jobs.get(job_id)
        split = split_element(job_id)
        if split is None:
            return known
        parent = self.jobs.get(split[0])
        if parent is None or parent[0].array is None:
            return known
        job = known[0] if known is not None else parent[0].element(split[1])
        spec = known[1] if known is not None else parent[1]
        env = {
            **spec.env,
            "HETSCHED_ARRAY_JOB_ID": split[0],
            "HETSCHED_ARRAY_INDEX": str(split[1]),
            "HETSCHED_ARRAY_SIZE": str(len(parent[0].array)),
        }
        return job, replace(spec, env=MappingProxyType(env))

    def _account(self, job_id: str) -> tuple[str | None, RunAs | None]:
        """Why a task of the job cannot start, or the OS account it runs as."""
        known = self._known(job_id)
        if known is None:
            return "no spec", None
        if self.run_as is None:
            return None, None
        user = known[0].user
        account = self.run_as.get(user)
        if account is None:
            return f"no OS account mapped for user {user}", None
        return None, account

    def _job(self, job_id: str) -> Job | None:
        known = self._known(job_id)
        return None if known is None else known[0]

    def _host(self, node: str) -> str:
        """Where a task on ``node`` is reached (see ``controlplane/taskshape.py``)."""
        address = self.addresses.get(node)
        if address:
            return address
        return "127.0.0.1" if isinstance(self.executor, KillsByPid) else node

    def _launch(self, start: Start, run_as: RunAs | None, shape: Mapping[str, str]) -> Launch:
        """What the task runs: its job's command (its group's, if it has one), environment
        and directory, its devices, its maximum runtime, its account and its federation's
        lease; ``shape``: its count, rank and group (``controlplane/taskshape.py``)."""
        known = self._known(start.key.job)
        assert known is not None  # _account found it
        job, spec = known
        devices = tuple(
            (self.devices[d.device_id], d.share, self.device_indices[d.device_id])
            for d in start.placement.devices
        )
        env = {**spec.env, **shape}
        if self.checkpoints is not None:
            # what the service tells the task goes over the job's own variables
            env.update(self.checkpoints.env(start, job, run_as, spec.env.get("PATH")))
        fence = self._fence_file(spec)
        command = spec.command
        group = shape.get("HETSCHED_GROUP")
        if group is not None and group in spec.commands:
            command = spec.commands[group]
        return Launch(command, env, spec.workdir, devices, job.max_runtime_s, run_as, fence)

    def _fence_file(self, spec: LaunchSpec) -> Path | None:
        if spec.federation is None or self.fencing is None:
            return None
        return self.fencing.lease_file(spec.federation)

    def signal(self, stops: Sequence[Stop], now: float) -> list[Exit]:
        """SIGTERM each task (SIGKILL after its grace), after its notice when it has one
        (the notice file, then the job's notice signal); the executor reports the tasks
        with no process (never started, or ended meanwhile) as stopped by its next poll."""
        told: list[Stop] = []
        for stop in stops:
            key = stop.key
            # without the checkpoint protocol, or with an executor that gives no notice,
            # SIGTERM comes at once
            gives = self.checkpoints is not None and isinstance(self.executor, GivesNotice)
            notice_s = stop.notice_s if gives else 0.0
            signal = "SIGUSR1"
            handle = self.executor.handles.get(str(key))
            if notice_s > 0 and self.checkpoints is not None and handle and not handle.stopping:
                known = self._known(key.job)
                signal = self.checkpoints.notify(stop, known[0] if known else None, now)
            told.append(replace(stop, notice_s=notice_s, notice_signal=signal))
        self.executor.stop(told, now)
        return []

    def resized(self, resized: Sequence[tuple[str, int, int, str]], now: float) -> None:
        """Tell elastic jobs' running tasks their new count: the resize file (with the
        checkpoint protocol; new ranks learn it from their environment)."""
        if self.checkpoints is not None:
            for job_id, run, replicas, reason in resized:
                self.checkpoints.dirs.resized(job_id, run, replicas, now, reason)

    def poll(self, now: float) -> list[Exit]:
        """Tasks that ended since the last poll (a guard kill says so in its reason)."""
        out: list[Exit] = []
        for exit_ in self.executor.poll(now):
            why = self._guard_kills.pop(task_key(exit_.job_id, exit_.task, exit_.run), None)
            if why is not None and not exit_.stopped:
                exit_ = exit_._replace(reason=f"killed by the overcommit guard: {why}")
            out.append(exit_)
        return out

    def next_due(self) -> float | None:
        """When the executor next escalates a stop or ends a task past its maximum runtime,
        the guard's next round is due, or the running tasks' checkpoint files are looked at
        again, whichever is first (None: none of these)."""
        times = [self.executor.next_due()]
        if self.checkpoints is not None:
            times.append(self.checkpoints.next_due())
        if self.guard is not None:
            times.append(self._guard_at + self.guard.spec.interval_s)
        return min((t for t in times if t is not None), default=None)

    # -- the overcommit guard --------------------------------------------------------------

    def guard_round(self, now: float, running: Mapping[TaskKey, Placement]) -> list[Alert]:
        """Every ``guard.spec.interval_s``: measure the ``running`` tasks against their
        requests and kill what the guard names (a best-effort task, by the profile's
        policy); its exit is reported later as a failure with the guard's reason. Returns
        the alerts raised."""
        guard = self.guard
        if guard is None or now - self._guard_at < guard.spec.interval_s:
            return []
        on_nodes = not isinstance(self.executor, KillsByPid)
        if on_nodes and not isinstance(self.executor, GuardsOnNodes):
            return []  # its pids are not this machine's: nothing to measure
        self._guard_at = now
        watched: list[Watched] = []
        for key, handle in self.executor.handles.items():
            placement = running.get(TaskKey(handle.job_id, handle.task, handle.run))
            known = self._known(handle.job_id)
            if placement is None or known is None or handle.stopping:
                continue
            watched.append(
                Watched(
                    key,
                    handle.job_id,
                    handle.task,
                    handle.run,
                    placement.node,
                    handle.pid,
                    placement.memory_mib,
                    placement.cpu_milli,
                    known[0].best_effort,
                )
            )
        if isinstance(self.executor, GuardsOnNodes) and on_nodes:
            # measured and killed on the nodes; the kills' exits say why by themselves
            alerts = self.executor.guard_nodes(guard.spec, watched)
            guard.take(alerts)
            return alerts
        alerts = guard.check(watched, now)
        for alert in alerts:
            if alert.killed and self.executor.kill(alert.killed):
                self._guard_kills[alert.killed] = alert.message
        return alerts
