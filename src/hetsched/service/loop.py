"""The reconcile loop: the one thread that owns the scheduling core and the executor.

Each turn:
  1. collect events: submissions and cancellations from the API (already committed by it),
     task exits from the executor, and a Tick now and then;
  2. ``actions = core.handle(events, now)``;
  3. commit, in one transaction, what the turn changed: task exits and the allocations they
     free, new tasks and allocations for Binds, tasks asked to stop, job states with their
     transitions and pending explanations;
  4. only then carry out the actions: spawn processes, signal process groups;
  5. commit the pids and start times of what was spawned.

A crash between 3 and 5 leaves tasks ``starting`` without a pid: recovery treats them as
lost and sweeps away any process that carries their key. A crash before 3 loses only
decisions, which the rebuilt core takes again.

Runs numbers: the core numbers a job's runs from 1 each time it learns of the job; the
store keeps numbering across restarts. ``run_offset`` maps one onto the other.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Connection, and_, update

from hetsched.agent.executor import Executor, RunAs, TaskExit, local_indices, task_key
from hetsched.agent.guard import Guard, Watched
from hetsched.agent.watcher import DeviceWatcher
from hetsched.cluster.placement import Placement
from hetsched.model.device import Device, Node
from hetsched.model.lifecycle import TERMINAL
from hetsched.scheduler import (
    Action,
    Bind,
    DeviceAdded,
    Event,
    JobCancelled,
    JobSubmitted,
    Kill,
    Pending,
    Preempt,
    Reject,
    Scheduler,
    TaskFinished,
    TaskStopped,
    Tick,
)
from hetsched.service.metrics import LoopMetrics
from hetsched.service.schemas import SubmitSpec, from_stored
from hetsched.service.store import Store
from hetsched.service.tables import allocations, jobs, tasks, transitions

__all__ = ["ControlLoop", "placement_from_json"]

log = logging.getLogger(__name__)


def placement_from_json(data: dict[str, Any]) -> Placement:
    from hetsched.cluster.placement import DeviceShare

    return Placement(
        str(data["node"]),
        int(data["cpu_milli"]),
        int(data["memory_mib"]),
        tuple(DeviceShare(str(d["id"]), int(d["share"])) for d in data.get("devices", [])),
    )


@dataclass(slots=True)
class _Turn:
    """What one turn must write."""

    exits: list[TaskExit] = field(default_factory=list)
    binds: list[Bind] = field(default_factory=list)
    stops: list[tuple[str, int, int, float | None]] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    explanations: dict[str, dict[str, object] | None] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)


class ControlLoop:
    """Owns the core; the API talks to it only through :meth:`submitted` and
    :meth:`cancelled`, after committing."""

    def __init__(
        self,
        store: Store,
        scheduler: Scheduler,
        executor: Executor,
        nodes: Iterable[Node],
        run_as: dict[str, RunAs] | None = None,
        tick_s: float = 0.5,
        make_core: Callable[[], Scheduler] | None = None,
        watcher: DeviceWatcher | None = None,
        guard: Guard | None = None,
    ) -> None:
        self.store = store
        self.core = scheduler
        #: builds a fresh core with the nodes added, for rebuilding after a failed turn
        self.make_core = make_core
        self.executor = executor
        self.run_as = run_as
        self.tick_s = tick_s
        self.min_turn_s = 0.01
        node_list = list(nodes)
        self.devices: dict[str, Device] = {d.id: d for n in node_list for d in n.devices}
        self.device_indices: dict[str, int] = {}
        for node in node_list:
            self.device_indices.update(local_indices(node.devices))
        self.specs: dict[str, SubmitSpec] = {}
        #: history entries of each core record already in the store
        self.persisted: dict[str, int] = {}
        #: store run = core run + offset
        self.run_offset: dict[str, int] = {}
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pending_events: list[Any] = []
        #: tasks stopped before they ran: (job id, task, store run), released next commit
        self._pending_release: list[tuple[str, int, int]] = []
        #: tasks that could not be started, reported as failed exits in the next turn
        self._failed_starts: list[TaskExit] = []
        self._last_tick = 0.0
        self.lock = threading.Lock()
        #: the node view the API serves, refreshed by the loop
        self.nodes_view: list[dict[str, Any]] = []
        #: the core's quota tree with usage, refreshed by the loop (empty without one)
        self.quota_view: dict[str, dict[str, dict[str, float]]] = {}
        self._nodes_at = 0.0
        self.turns = 0
        #: restart counts of jobs resubmitted by recovery, applied after their submission
        self.restarts_to_restore: dict[str, int] = {}
        #: the local node's device watcher (hot-plug and health); its events come in
        #: through :meth:`device_events`
        self.watcher = watcher
        if watcher is not None:
            watcher.sink = self.device_events
        #: the overcommit guard, run every ``guard.spec.interval_s`` by the loop
        self.guard = guard
        self._guard_at = 0.0
        #: executor key -> why the guard killed that task, until its exit is reported
        self._guard_kills: dict[str, str] = {}
        #: counters, histograms and the dashboard's history (service/metrics.py)
        self.metrics = LoopMetrics()

    # -- the API side --------------------------------------------------------------------

    def submitted(self, row: dict[str, Any], spec: SubmitSpec | None = None) -> None:
        """A job row the API has committed, with the spec it validated from the row's body
        (then the loop need not validate it again)."""
        self._inbox.put(("submit", (row, spec)))
        self._wake.set()

    def cancelled(self, job_id: str, user: str) -> None:
        self._inbox.put(("cancel", (job_id, user)))
        self._wake.set()

    def device_events(self, events: list[Event]) -> None:
        """Hot-plug and health changes from the device watcher (called from its thread)."""
        self._inbox.put(("devices", events))
        self._wake.set()

    # -- lifecycle -----------------------------------------------------------------------

    def start(self, initial: list[Any]) -> None:
        self._pending_events = list(initial)
        self._thread = threading.Thread(target=self._run, name="hetsched-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.perf_counter()
            try:
                self.turn()
                self.metrics.turn_done(time.time())
            except Exception:
                self.metrics.turn_failed()
                # The core may now disagree with the store (a decision it took was not
                # committed). The store is the truth: rebuild the core from it, exactly as
                # a restart would.
                log.exception("reconcile turn failed; rebuilding the core from the store")
                self._rebuild()
            # a pause as long as the turn itself (at least min_turn_s) batches a burst of
            # submissions into one turn (one cycle, one commit) and keeps the loop from
            # taking more than half of the interpreter from the API under load
            time.sleep(max(self.min_turn_s, min(0.2, time.perf_counter() - began)))
            self._wake.wait(timeout=0.05)
            self._wake.clear()

    def _rebuild(self) -> None:
        if self.make_core is None:
            time.sleep(0.5)
            return
        from hetsched.service.recovery import recover

        try:
            self.executor.shutdown()
            self.core = self.make_core()
            self.specs.clear()
            self.persisted.clear()
            self.run_offset.clear()
            self._pending_release = []
            self._failed_starts = []
            # API submissions already queued are in the store: recovery replays them
            while True:
                try:
                    self._inbox.get_nowait()
                except queue.Empty:
                    break
            self._pending_events = recover(self)
        except Exception:
            log.exception("rebuilding the core failed; retrying")
            time.sleep(1.0)

    # -- one turn ------------------------------------------------------------------------

    def job_key(self, job_id: str, task: int, core_run: int) -> str:
        return task_key(job_id, task, core_run + self.run_offset.get(job_id, 0))

    def turn(self, now: float | None = None) -> list[Action]:
        now = time.time() if now is None else now
        turn = _Turn()
        events, self._pending_events = self._pending_events, []
        while True:
            try:
                kind, payload = self._inbox.get_nowait()
            except queue.Empty:
                break
            if kind == "submit":
                events.append(self._submit_event(*payload))
            elif kind == "devices":
                events.extend(self._device_event(e) for e in payload)
            else:
                job_id, user = payload
                events.append(JobCancelled(job_id, f"cancelled by {user}"))
        self._guard_round(now)
        failed, self._failed_starts = self._failed_starts, []
        for exit_ in [*failed, *self.executor.poll(now)]:
            why = self._guard_kills.pop(task_key(exit_.job_id, exit_.task, exit_.run), None)
            if why is not None and not exit_.stopped:
                exit_ = replace(exit_, reason=f"killed by the overcommit guard: {why}")
            turn.exits.append(exit_)
            events.append(self._exit_event(exit_))
        if not events and now - self._last_tick < self.tick_s:
            self._refresh_nodes(now)
            return []
        self._last_tick = now
        with self.lock:
            began = time.perf_counter()
            actions = self.core.handle([*events, Tick()], now)
            self.metrics.observe_turn(self.core, actions, now, time.perf_counter() - began)
            for job_id, restarts in self.restarts_to_restore.items():
                record = self.core.jobs.get(job_id)
                if record is not None:
                    record.restarts = max(record.restarts, restarts)
            self.restarts_to_restore = {}
        self.turns += 1
        turn.touched.update(j for j in map(_job_id_of, events) if j)
        for action in actions:
            self._plan(action, turn)
        self._commit(turn, now)
        self._carry_out(turn, now)
        self._refresh_nodes(now)
        return actions

    def _submit_event(self, row: dict[str, Any], spec: SubmitSpec | None) -> Event:
        spec = spec if spec is not None else from_stored(row["spec"])
        job = spec.to_job(row["id"], row["owner"], float(row["submitted_at"]))
        self.specs[job.id] = spec
        self.persisted[job.id] = 1  # the store wrote the "submitted" transition
        return JobSubmitted(job)

    def _device_event(self, event: Event) -> Event:
        """Note a hot-plugged device for the executor (its id, its index among the node's
        devices of its class and vendor) before the core sees it."""
        if isinstance(event, DeviceAdded) and event.device.id not in self.devices:
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

    def _guard_round(self, now: float) -> None:
        """Measure running tasks against their requests; kill what the guard names (a
        best-effort task, by the profile's policy). Its exit is reported as a failure with
        the guard's reason in a later turn."""
        guard = self.guard
        if guard is None or now - self._guard_at < guard.spec.interval_s:
            return
        self._guard_at = now
        watched: list[Watched] = []
        for key, handle in self.executor.handles.items():
            record = self.core.jobs.get(handle.job_id)
            if record is None or handle.stopping:
                continue
            core_run = handle.run - self.run_offset.get(handle.job_id, 0)
            placement = record.placements.get(handle.task) if record.run == core_run else None
            if placement is None:
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
                    record.job.best_effort,
                )
            )
        alerts = guard.check(watched, now)
        # an alert on a job goes into its history (``hetsched why``), where the state stays
        rows = [
            {
                "job_id": a.job_id,
                "time": a.time,
                "source": "running",
                "target": "running",
                "cause": f"overcommit guard: {a.message}",
            }
            for a in alerts
            if a.job_id
        ]
        if rows:
            with self.store.write() as conn:
                conn.execute(transitions.insert(), rows)
        for alert in alerts:
            victim = self.executor.handles.get(alert.killed) if alert.killed else None
            if victim is not None:
                self._guard_kills[alert.killed] = alert.message
                self.executor.kill_now(victim.pid)
                self._wake.set()

    def _exit_event(self, exit_: TaskExit) -> Event:
        core_run = exit_.run - self.run_offset.get(exit_.job_id, 0)
        if exit_.stopped:
            return TaskStopped(exit_.job_id, exit_.task, core_run)
        return TaskFinished(exit_.job_id, exit_.task, core_run, exit_.exit_code == 0, exit_.reason)

    def _plan(self, action: Action, turn: _Turn) -> None:
        turn.touched.add(action.job_id)
        match action:
            case Bind():
                turn.binds.append(action)
            case Kill(job_id, task, run, _reason):
                turn.stops.append((job_id, task, run, None))
            case Preempt(job_id=job_id, run=run, tasks=stopped, grace_s=grace_s):
                turn.preempted.append(job_id)
                for task in stopped:
                    turn.stops.append((job_id, task, run, grace_s))
            case Pending(job_id, explanation):
                turn.explanations[job_id] = explanation.to_dict()
            case Reject():
                pass

    # -- step 3: commit ------------------------------------------------------------------

    def _commit(self, turn: _Turn, now: float) -> None:
        with self.store.write() as conn:
            for exit_ in turn.exits:
                self._record_exit(conn, exit_, now)
            for job_id, task, run, _grace in turn.stops:
                store_run = run + self.run_offset.get(job_id, 0)
                conn.execute(
                    update(tasks)
                    .where(
                        tasks.c.job_id == job_id,
                        tasks.c.task == task,
                        tasks.c.run == store_run,
                        tasks.c.state.in_(("starting", "running")),
                    )
                    .values(state="stopping")
                )
            for bind in turn.binds:
                self._record_bind(conn, bind, now)
            for job_id in dict.fromkeys(turn.preempted):
                conn.execute(
                    update(jobs)
                    .where(jobs.c.id == job_id)
                    .values(preemptions=jobs.c.preemptions + 1)
                )
            for job_id in turn.touched:
                self._record_job(conn, job_id, turn, now)

    def _record_exit(self, conn: Connection, exit_: TaskExit, now: float) -> None:
        state = (
            "stopped" if exit_.stopped else ("exited" if exit_.exit_code is not None else "lost")
        )
        key = (
            tasks.c.job_id == exit_.job_id,
            tasks.c.task == exit_.task,
            tasks.c.run == exit_.run,
        )
        conn.execute(
            update(tasks)
            .where(*key, tasks.c.ended_at.is_(None))
            .values(state=state, ended_at=now, exit_code=exit_.exit_code, reason=exit_.reason)
        )
        release_allocations(conn, exit_.job_id, exit_.task, exit_.run, now)
        if not exit_.stopped and exit_.exit_code is not None:
            conn.execute(
                update(jobs).where(jobs.c.id == exit_.job_id).values(exit_code=exit_.exit_code)
            )

    def _record_bind(self, conn: Connection, bind: Bind, now: float) -> None:
        store_run = bind.run + self.run_offset.get(bind.job_id, 0)
        for task, placement in bind.placements:
            conn.execute(
                tasks.insert().values(
                    job_id=bind.job_id,
                    task=task,
                    run=store_run,
                    node=placement.node,
                    placement=placement.to_dict(),
                    state="starting",
                    bound_at=now,
                    reason="",
                )
            )
            for share in placement.devices:
                conn.execute(
                    allocations.insert().values(
                        job_id=bind.job_id,
                        task=task,
                        run=store_run,
                        device_id=share.device_id,
                        share=share.share,
                        allocated_at=now,
                        live=True,
                    )
                )

    def _record_job(self, conn: Connection, job_id: str, turn: _Turn, now: float) -> None:
        record = self.core.jobs.get(job_id)
        if record is None:
            return
        done = self.persisted.get(job_id, 0)
        new = record.history[done:]
        if not new and job_id not in turn.explanations:
            return  # nothing the store shows changed (a fresh submission, most often)
        values: dict[str, Any] = {}
        if new:
            conn.execute(
                transitions.insert(),
                [
                    {
                        "job_id": job_id,
                        "time": t.time,
                        "source": None if t.source is None else t.source.value,
                        "target": t.target.value,
                        "cause": t.cause,
                    }
                    for t in new
                ],
            )
            self.persisted[job_id] = len(record.history)
            assert record.state is not None
            values.update(
                state=record.state.value,
                reason=new[-1].cause,
                run=record.run + self.run_offset.get(job_id, 0),
                restarts=record.restarts,
                started_at=record.started,
                ended_at=record.ended,
            )
            if record.state.value != "pending":
                values["explanation"] = None
        if job_id in turn.explanations:
            values["explanation"] = turn.explanations[job_id]
        conn.execute(update(jobs).where(jobs.c.id == job_id).values(**values))
        if new and record.started is not None:
            conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id, jobs.c.first_started_at.is_(None))
                .values(first_started_at=record.started)
            )
        if record.state in TERMINAL:
            self.specs.pop(job_id, None)

    # -- step 4 and 5: carry out ---------------------------------------------------------

    def _carry_out(self, turn: _Turn, now: float) -> None:
        started: list[tuple[str, int, int, int, float, float]] = []
        failed: list[TaskExit] = []
        for bind in turn.binds:
            spec = self.specs.get(bind.job_id)
            record = self.core.jobs[bind.job_id]
            store_run = bind.run + self.run_offset.get(bind.job_id, 0)
            for task, placement in bind.placements:
                if spec is None:
                    failed.append(TaskExit(bind.job_id, task, store_run, None, False, "no spec"))
                    continue
                run_as = None
                if self.run_as is not None:
                    run_as = self.run_as.get(record.job.user)
                    if run_as is None:
                        failed.append(
                            TaskExit(
                                bind.job_id,
                                task,
                                store_run,
                                None,
                                False,
                                f"no OS account mapped for user {record.job.user}",
                            )
                        )
                        continue
                try:
                    handle = self.executor.start(
                        bind.job_id,
                        task,
                        store_run,
                        placement,
                        [
                            (self.devices[d.device_id], d.share, self.device_indices[d.device_id])
                            for d in placement.devices
                        ],
                        spec.command,
                        spec.env,
                        spec.workdir,
                        record.job.max_runtime_s,
                        run_as,
                    )
                except OSError as exc:
                    failed.append(
                        TaskExit(bind.job_id, task, store_run, None, False, f"cannot start: {exc}")
                    )
                    continue
                started.append(
                    (bind.job_id, task, store_run, handle.pid, handle.pid_started, time.time())
                )
        for job_id, task, run, grace in turn.stops:
            key = self.job_key(job_id, task, run)
            if not self.executor.stop(key, grace, now):
                # nothing runs for it (it never started or already ended): stopped at once
                self._pending_events.append(TaskStopped(job_id, task, run))
                self._pending_release.append((job_id, task, run + self.run_offset.get(job_id, 0)))
        if started or failed or self._pending_release:
            with self.store.write() as conn:
                for job_id, task, run, pid, pid_started, at in started:
                    conn.execute(
                        update(tasks)
                        .where(
                            tasks.c.job_id == job_id,
                            tasks.c.task == task,
                            tasks.c.run == run,
                            tasks.c.state == "starting",
                        )
                        .values(state="running", pid=pid, pid_started=pid_started, started_at=at)
                    )
                for job_id, task, run in self._pending_release:
                    conn.execute(
                        update(tasks)
                        .where(
                            tasks.c.job_id == job_id,
                            tasks.c.task == task,
                            tasks.c.run == run,
                            tasks.c.ended_at.is_(None),
                        )
                        .values(state="stopped", ended_at=now, reason="stopped before it ran")
                    )
                    release_allocations(conn, job_id, task, run, now)
            self._pending_release = []
        # a task that could not start failed at once; it is reported in the next turn
        self._failed_starts.extend(failed)
        if failed:
            self._wake.set()

    # -- views ---------------------------------------------------------------------------

    def _refresh_nodes(self, now: float) -> None:
        if now - self._nodes_at < 0.5:
            return
        self._nodes_at = now
        # why the watcher last saw a device change ("removed", "unhealthy: XID 79")
        reasons = {d.id: d.reason for d in self.watcher.view()} if self.watcher else {}
        with self.lock:
            state = self.core.state
            view = []
            for row, node in enumerate(state.nodes):
                view.append(
                    {
                        "name": node.name,
                        "active": bool(state.active[row]),
                        "cpu_milli": int(state.cpu_cap[row]),
                        "cpu_free_milli": int(state.cpu_free[row]),
                        "memory_mib": int(state.mem_cap[row]),
                        "memory_free_mib": int(state.mem_free[row]),
                        "labels": dict(node.labels),
                        "devices": [
                            {
                                "id": d.id,
                                "class": d.device_class,
                                "vendor": d.vendor,
                                "model": d.model,
                                "free_share": int(state.dev_free[row, slot]),
                                "healthy": bool(state.dev_healthy[row, slot]),
                                "health_reason": reasons.get(d.id, ""),
                            }
                            for slot, d in enumerate(node.devices)
                        ],
                    }
                )
            self.quota_view = self._quotas()
            self.metrics.sample(self.core, now)
        self.nodes_view = view

    def _quotas(self) -> dict[str, dict[str, dict[str, float]]]:
        """What the core's queue tree (the profile's ``queues``) says per queue and flavor:
        nominal quota, usage now, borrowed (above nominal) and free (below it). Device
        flavors are in devices, cpu in millicores, memory in MiB."""
        quotas = getattr(self.core, "quotas", None)
        ledger = getattr(self.core, "ledger", None)
        if quotas is None or ledger is None or not quotas.enabled:
            return {}
        usage = quotas.usage(ledger)
        out: dict[str, dict[str, dict[str, float]]] = {}
        for name, node in quotas.nodes.items():
            used = usage.get(name, {})
            known = quotas.flavors | {"cpu", "memory"}
            flavors = sorted(set(node.nominal) | {f for f, a in used.items() if a and f in known})
            per: dict[str, dict[str, float]] = {}
            for flavor in flavors:
                scale = 1.0 if flavor in ("cpu", "memory") else 1000.0
                nominal = quotas.nominal(name, flavor) / scale
                held = used.get(flavor, 0) / scale
                per[flavor] = {
                    "quota": nominal,
                    "used": held,
                    "borrowed": max(0.0, held - nominal),
                    "free": max(0.0, nominal - held),
                }
            out[name] = per
        return out


def release_allocations(conn: Connection, job_id: str, task: int, run: int, now: float) -> None:
    conn.execute(
        update(allocations)
        .where(
            and_(
                allocations.c.job_id == job_id,
                allocations.c.task == task,
                allocations.c.run == run,
                allocations.c.live.is_(True),
            )
        )
        .values(live=None, released_at=now)
    )


def _job_id_of(event: Event) -> str:
    match event:
        case JobSubmitted(job):
            return job.id
        case JobCancelled(job_id) | TaskFinished(job_id) | TaskStopped(job_id):
            return job_id
    return ""
