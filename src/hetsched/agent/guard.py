"""The overcommit guard: what tasks really use, compared with what they asked for.

Every ``interval_s`` the service hands the guard its running tasks (:class:`Watched`). The
guard measures each task's process tree (psutil: resident memory and CPU of the session
leader and all its descendants) plus, where NVML answers, the GPU memory of those processes,
and the machine as a whole. It raises an :class:`Alert`

- ``task_memory``: a task uses more memory than its request x ``memory_tolerance``;
- ``node_memory`` / ``node_cpu``: the machine's use passes the profile's threshold.

An alert is raised once when the condition starts, not at every round while it lasts.
With ``kill_best_effort`` the guard asks for the offending task to be killed when it is a
best-effort task (on a node alert: the best-effort task using the most memory); it never
asks to kill a guaranteed task. Killing is the caller's job (the service kills the process
group and the core learns of a failed task with the guard's reason).

In-process API for metrics and views (read from any thread):
- :attr:`Guard.alerts`: the most recent alerts, oldest first (a bounded deque);
- :attr:`Guard.counts`: alerts raised so far, by kind;
- :attr:`Guard.kills`: tasks the guard asked to kill so far;
- :attr:`Guard.usage`: task key -> the last :class:`Usage` measured.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psutil

from hetsched.framework.profile import GuardSpec

__all__ = ["Alert", "Guard", "Usage", "Watched", "children_map", "measure_tree"]

log = logging.getLogger("hetsched.agent.guard")
_MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class Watched:
    """A running task as the service knows it."""

    key: str
    job_id: str
    task: int
    run: int
    node: str
    #: the session leader of its process group
    pid: int
    memory_mib: int
    cpu_milli: int
    best_effort: bool


@dataclass(frozen=True, slots=True)
class Usage:
    """What a task's processes use: resident memory, GPU memory (NVML), CPU in millicores
    since the previous measurement (0 at the first)."""

    memory_mib: float
    gpu_memory_mib: float
    cpu_milli: float
    processes: int


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert: ``kind`` is ``task_memory``, ``node_memory`` or ``node_cpu``. ``job_id``,
    ``task`` and ``run`` are empty/None for node alerts; ``killed`` names the task key the
    guard asked to kill for it, if any."""

    time: float
    kind: str
    node: str
    message: str
    measured: float
    limit: float
    job_id: str = ""
    task: int | None = None
    run: int | None = None
    killed: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "kind": self.kind,
            "node": self.node,
            "job_id": self.job_id,
            "task": self.task,
            "run": self.run,
            "message": self.message,
            "measured": self.measured,
            "limit": self.limit,
            "killed": self.killed,
        }


def children_map() -> dict[int, list[int]]:
    """Parent pid -> child pids of every process, read once per guard round (psutil's own
    ``children()`` reads the whole process table at each call)."""
    out: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["pid", "ppid"]):
        ppid = proc.info.get("ppid")
        if ppid is not None:
            out.setdefault(int(ppid), []).append(int(proc.info["pid"]))
    return out


def measure_tree(
    pid: int,
    gpu_memory: dict[int, int] | None = None,
    children: dict[int, list[int]] | None = None,
) -> tuple[float, float, set[int], float]:
    """(resident MiB, GPU MiB, pids, CPU seconds so far) of a process and its descendants."""
    try:
        root = psutil.Process(pid)
        if children is None:
            procs = [root, *root.children(recursive=True)]
        else:
            procs, todo = [root], list(children.get(pid, ()))
            while todo:
                child = todo.pop()
                with contextlib.suppress(psutil.Error):
                    procs.append(psutil.Process(child))
                todo.extend(children.get(child, ()))
    except psutil.Error:
        return 0.0, 0.0, set(), 0.0
    rss = 0
    cpu = 0.0
    pids: set[int] = set()
    for proc in procs:
        try:
            with proc.oneshot():
                rss += proc.memory_info().rss
                times = proc.cpu_times()
                cpu += times.user + times.system
            pids.add(proc.pid)
        except psutil.Error:
            continue
    gpu = sum((gpu_memory or {}).get(p, 0) for p in pids)
    return rss / _MIB, gpu / _MIB, pids, cpu


@dataclass
class Guard:
    spec: GuardSpec
    node: str = "local"
    #: pid -> GPU memory in bytes (NVML per-process memory), or None without NVML
    gpu_memory: Callable[[], dict[int, int]] | None = None
    alerts: deque[Alert] = field(default_factory=lambda: deque(maxlen=1000))
    counts: Counter[str] = field(default_factory=Counter)
    kills: int = 0
    usage: dict[str, Usage] = field(default_factory=dict)
    #: (kind, subject) of alerts whose condition still holds
    _active: set[tuple[str, str]] = field(default_factory=set)
    _cpu_seen: dict[str, tuple[float, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check(
        self,
        tasks: Iterable[Watched],
        now: float | None = None,
        node_memory: float | None = None,
        node_cpu: float | None = None,
    ) -> list[Alert]:
        """Measure, raise new alerts, and return them; an alert with ``killed`` set asks the
        caller to kill that task. ``node_memory`` and ``node_cpu`` (fractions of the machine
        in use) default to psutil's answers."""
        now = time.time() if now is None else now
        watched = list(tasks)
        usage: dict[str, Usage] = {}
        killed: set[str] = set()
        new = self._task_alerts(watched, usage, killed, now)
        memory = psutil.virtual_memory().percent / 100 if node_memory is None else node_memory
        new += self._node_alert(
            "node_memory", memory, self.spec.node_memory_threshold, watched, usage, killed, now
        )
        if self.spec.node_cpu_threshold is not None:
            cpu = psutil.cpu_percent(interval=None) / 100 if node_cpu is None else node_cpu
            new += self._node_alert(
                "node_cpu", cpu, self.spec.node_cpu_threshold, watched, usage, killed, now
            )
        self._record(watched, usage, new)
        return new

    def _task_alerts(
        self, watched: list[Watched], usage: dict[str, Usage], killed: set[str], now: float
    ) -> list[Alert]:
        """Measure each task (filling ``usage``) and alert, once while it lasts, on a task
        over its memory request; a best-effort one is named in ``killed`` when the profile
        says so."""
        wall = time.monotonic()
        gpu = self.gpu_memory() if self.gpu_memory is not None else {}
        tree = children_map() if watched else {}
        new: list[Alert] = []
        for task in watched:
            rss, gpu_mib, pids, cpu_s = measure_tree(task.pid, gpu, tree)
            cpu_milli = 0.0
            before = self._cpu_seen.get(task.key)
            if before is not None and wall > before[0]:
                cpu_milli = max(0.0, (cpu_s - before[1]) / (wall - before[0]) * 1000)
            self._cpu_seen[task.key] = (wall, cpu_s)
            usage[task.key] = Usage(rss + gpu_mib, gpu_mib, cpu_milli, len(pids))
            limit = task.memory_mib * self.spec.memory_tolerance
            subject = ("task_memory", task.key)
            if not (pids and task.memory_mib > 0 and rss + gpu_mib > limit):
                self._active.discard(subject)
                continue
            if subject in self._active:
                continue
            self._active.add(subject)
            kill = task.key if self.spec.kill_best_effort and task.best_effort else ""
            if kill:
                killed.add(kill)
            message = (
                f"task {task.task} of {task.job_id} uses {rss + gpu_mib:.0f}Mi of "
                f"memory, over its request of {task.memory_mib}Mi"
                + (" (best-effort: killed)" if kill else "")
            )
            # the use unrounded: a rounded figure could read as the limit itself
            at = (now, "task_memory", task.node, message, rss + gpu_mib, limit)
            new.append(Alert(*at, task.job_id, task.task, task.run, kill))
        return new

    def _record(self, watched: list[Watched], usage: dict[str, Usage], new: list[Alert]) -> None:
        """Publish this round's usage and alerts (read by the API under the lock), and
        forget the tasks that are gone."""
        live = {t.key for t in watched}
        with self._lock:
            self.usage = usage
            for key in [k for k in self._cpu_seen if k not in live]:
                del self._cpu_seen[key]
            self._active = {a for a in self._active if a[0] != "task_memory" or a[1] in live}
        self._publish(new)

    def _publish(self, new: list[Alert]) -> None:
        with self._lock:
            for alert in new:
                self.alerts.append(alert)
                self.counts[alert.kind] += 1
                if alert.killed:
                    self.kills += 1
        for alert in new:
            log.warning("overcommit guard: %s", alert.message)

    def _node_alert(
        self,
        kind: str,
        used: float,
        threshold: float,
        tasks: list[Watched],
        usage: dict[str, Usage],
        killed: set[str],
        now: float,
    ) -> list[Alert]:
        subject = (kind, self.node)
        if used < threshold:
            self._active.discard(subject)
            return []
        if subject in self._active:
            return []
        self._active.add(subject)
        kill = ""
        if self.spec.kill_best_effort:
            candidates = [t for t in tasks if t.best_effort and t.key not in killed]
            if candidates:
                worst = max(candidates, key=lambda t: usage[t.key].memory_mib)
                kill = worst.key
                killed.add(kill)
        what = "memory" if kind == "node_memory" else "CPU"
        message = f"node {self.node}: {what} use {used:.0%} passed {threshold:.0%}"
        return [
            Alert(
                now,
                kind,
                self.node,
                message + (f" (killed best-effort task {kill})" if kill else ""),
                round(used, 4),
                threshold,
                killed=kill,
            )
        ]

    def take(self, alerts: Iterable[Alert]) -> None:
        """Publish alerts raised by the same guard run elsewhere (on a Ray node, by its
        agent) as this guard's own: in :attr:`alerts`, :attr:`counts` and :attr:`kills`."""
        self._publish(list(alerts))

    def recent(self, limit: int = 100) -> list[Alert]:
        """The most recent alerts, oldest first (safe from any thread)."""
        with self._lock:
            return list(self.alerts)[-limit:]
