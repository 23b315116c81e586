"""Prometheus metrics and the dashboard's history, one registry per service.

Two kinds of metric live here (the names are listed in docs/observability.md):

- *events*, counted by the reconcile loop as they happen (:class:`LoopMetrics`, in
  controlplane/loopmetrics.py): scheduling
  attempts, cycle latency, queue wait at bind, preemptions, loop turns and failures;
- *state*, computed when Prometheus scrapes (:class:`ServiceCollector`): jobs by queue and
  state, the oldest pending job per queue, the checkpoint age and work at risk of the
  running checkpointable jobs per queue, allocation, health and fragmentation of the
  devices, and what the agent measured when its watchers run.

Each service owns its :class:`~prometheus_client.CollectorRegistry` (never the global one),
so several services can run in one process, as they do in the tests.

Fragmentation is FGD's measure (:mod:`hetsched.cluster.frag`) per device class and model,
against a target workload taken from the jobs themselves: the distinct task shapes (CPU,
device count, share, selector) of the pending and running jobs that ask for that class,
weighted by task count (the 16 most common shapes). With no such job, the target is one
whole device of the class, under which the fragmented share is the free share of partly
used devices. Per model, the measure sees only that model's devices.
"""

from __future__ import annotations

import logging
import time
from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from prometheus_client import CollectorRegistry, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from hetsched.cluster.frag import TargetClass, TargetWorkload, eligibility, expected_frag
from hetsched.cluster.placement import Placement
from hetsched.cluster.stranding import Typical, stranded_accelerators
from hetsched.controlplane.context import Service
from hetsched.controlplane.loopmetrics import History, LoopMetrics, Sample
from hetsched.controlplane.utilization import (
    SIMULATED_LABEL,
    GuardLike,
    device_utilization,
    task_devices,
    task_of_key,
)
from hetsched.model.device import SHARE_UNITS, Device
from hetsched.scheduler.view import SchedulerView

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = [
    "CONTENT_TYPE",
    "METRIC_NAMES",
    "History",
    "LoopMetrics",
    "Sample",
    "ServiceCollector",
    "install",
    "measured_by_class",
    "render",
    "target_workload",
]

log = logging.getLogger(__name__)

# the text format shows a counter's creation time as a gauge family of its own
# (``..._created``), which doubles the series and helps no alert or panel here
disable_created_metrics()  # type: ignore[no-untyped-call]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_MIB = 1 << 20

#: shapes kept in a fragmentation target workload
_MAX_SHAPES = 16

#: every metric family this module exports (without the _total, _bucket... suffixes);
#: the deploy tests check that alert rules and dashboard panels use only these
METRIC_NAMES = frozenset(
    {
        "hetsched_scheduling_attempts_total",
        "hetsched_scheduling_cycle_duration_seconds",
        "hetsched_queue_wait_seconds",
        "hetsched_preemptions_total",
        "hetsched_migrations_total",
        "hetsched_checkpoints_total",
        "hetsched_lost_work_seconds_total",
        "hetsched_checkpoint_age_seconds",
        "hetsched_work_at_risk_seconds",
        "hetsched_loop_turns_total",
        "hetsched_loop_turn_failures_total",
        "hetsched_loop_last_turn_timestamp_seconds",
        "hetsched_loop_held_jobs",
        "hetsched_loop_wedged",
        "hetsched_store_unavailable",
        "hetsched_store_failures_total",
        "hetsched_store_outages_total",
        "hetsched_jobs",
        "hetsched_oldest_pending_job_age_seconds",
        "hetsched_speed_estimate_steps_per_second",
        "hetsched_speed_estimate_samples",
        "hetsched_nodes",
        "hetsched_cpu_capacity_cores",
        "hetsched_cpu_allocated_cores",
        "hetsched_devices",
        "hetsched_devices_unhealthy",
        "hetsched_device_healthy",
        "hetsched_device_allocated",
        "hetsched_device_allocation_ratio",
        "hetsched_device_utilization_ratio",
        "hetsched_fragmentation_ratio",
        "hetsched_fragmented_devices",
        "hetsched_stranded_accelerators",
        "hetsched_stranded_accelerators_ratio",
        "hetsched_alerts_total",
        "hetsched_guard_kills_total",
        "hetsched_tasks_memory_used_bytes",
        "hetsched_tasks_gpu_memory_used_bytes",
        "hetsched_tasks_cpu_used_cores",
        "hetsched_device_memory_used_bytes",
    }
)


def _parts(service: Service) -> list[object]:
    """Every object of the service that may measure or alert, present or not."""
    found: list[object] = []
    for owner in (service, service.loop, service.executor):
        for name in ("watcher", "guard", "health", "monitor"):
            part = getattr(owner, name, None)
            if part is not None and all(part is not f for f in found):
                found.append(part)
    return found


# -- what a scrape computes --------------------------------------------------------------


def target_workload(view: SchedulerView, device_class: str) -> TargetWorkload:
    """The fragmentation target for ``device_class``: see the module docstring. The shapes
    come from the core's counters (kept as jobs come and go), not from a scan of the jobs."""
    shapes = view.live_shapes(device_class)
    if not shapes:
        return TargetWorkload.of([TargetClass(0, 1, SHARE_UNITS, None, 1.0)])
    return TargetWorkload.of(
        TargetClass(cpu, count, share, selector, float(weight))
        for (cpu, count, share, selector), weight in shapes.most_common(_MAX_SHAPES)
    )


def _gauge(name: str, doc: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


class ServiceCollector(Collector):
    """State metrics, computed from the service at each scrape."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        service = self.service
        now = time.time()
        yield from self._store(service)
        yield from self._jobs(service)
        yield from self._speeds(service)
        with service.loop.lock:
            view = service.loop.view
            metrics = [
                *self._pending_age(view, now),
                *self._checkpoint_age(view, now),
                *self._capacity(view),
                *self._fragmentation(view),
                *self._stranded(view, service.stranding),
            ]
            node_of = {d.id: n.name for n in view.cluster.nodes for d in n.devices}
            running = view.running_placements()
            devices_of = task_devices(view.cluster, running)
        yield from metrics
        yield from self._agent(service, node_of, devices_of, running)

    def _store(self, service: Service) -> Iterator[Metric]:
        health = service.store.health
        down = _gauge(
            "hetsched_store_unavailable",
            "1 while the store cannot be written (disk full, read-only filesystem, database "
            "server down): scheduling pauses and writes answer 503; 0 otherwise.",
        )
        down.add_metric([], 0.0 if health.outage is None else 1.0)
        yield down
        failures = CounterMetricFamily(
            "hetsched_store_failures",
            "Store errors that said the store could not be used (each failed write or read).",
        )
        failures.add_metric([], health.failures)
        yield failures
        outages = CounterMetricFamily(
            "hetsched_store_outages", "Times the store became unavailable."
        )
        outages.add_metric([], health.outages)
        yield outages

    def _jobs(self, service: Service) -> Iterator[Metric]:
        jobs = _gauge("hetsched_jobs", "Jobs by queue and state.", ["queue", "state"])
        try:
            usage = service.store.queue_usage()
        except Exception as exc:
            if service.store.health.failed(exc) is None:
                raise
            return  # not while the store cannot be read (hetsched_store_unavailable says so)
        for item in usage:
            jobs.add_metric([item["queue"], item["state"]], item["count"])
        yield jobs

    def _speeds(self, service: Service) -> Iterator[Metric]:
        rate = _gauge(
            "hetsched_speed_estimate_steps_per_second",
            "Throughput learned from progress reports per job type and device model: steps/s "
            "of one device (an exponentially weighted mean over intervals between reports).",
            ["job_type", "model"],
        )
        samples = _gauge(
            "hetsched_speed_estimate_samples",
            "Intervals between progress reports the speed estimate rests on.",
            ["job_type", "model"],
        )
        for estimate in service.speeds.estimates() if service.speeds is not None else []:
            rate.add_metric([estimate.job_type, estimate.model], estimate.rate)
            samples.add_metric([estimate.job_type, estimate.model], estimate.samples)
        yield rate
        yield samples

    def _pending_age(self, view: SchedulerView, now: float) -> Iterator[Metric]:
        oldest = view.oldest_pending(now)
        family = _gauge(
            "hetsched_oldest_pending_job_age_seconds",
            "Per queue, how long its longest-waiting pending job has waited (since its "
            "submission or requeue).",
            ["queue"],
        )
        for queue, age in sorted(oldest.items()):
            family.add_metric([queue], age)
        yield family

    def _checkpoint_age(self, view: SchedulerView, now: float) -> Iterator[Metric]:
        ages = view.checkpoint_ages(now)
        oldest = _gauge(
            "hetsched_checkpoint_age_seconds",
            "Per queue, the longest time a running checkpointable job has gone since its "
            "last checkpoint (since its run started, without one).",
            ["queue"],
        )
        risk = _gauge(
            "hetsched_work_at_risk_seconds",
            "Per queue, the work its running checkpointable jobs would lose if stopped now: "
            "the sum of their times since their last checkpoint.",
            ["queue"],
        )
        for queue, values in sorted(ages.items()):
            oldest.add_metric([queue], max(values))
            risk.add_metric([queue], sum(values))
        yield oldest
        yield risk

    def _capacity(self, view: SchedulerView) -> Iterator[Metric]:
        state = view.cluster
        nodes = _gauge("hetsched_nodes", "Nodes by state.", ["state"])
        active = int(state.active.sum())
        nodes.add_metric(["active"], active)
        nodes.add_metric(["inactive"], len(state.nodes) - active)
        yield nodes
        cpu_cap = _gauge("hetsched_cpu_capacity_cores", "CPU cores of active nodes.")
        cpu_used = _gauge("hetsched_cpu_allocated_cores", "CPU cores allocated to tasks.")
        cap = int(state.cpu_cap[state.active].sum())
        cpu_cap.add_metric([], cap / 1000)
        cpu_used.add_metric([], (cap - int(state.cpu_free[state.active].sum())) / 1000)
        yield cpu_cap
        yield cpu_used

        labels = ["class", "model"]
        devices = _gauge("hetsched_devices", "Devices on active nodes.", labels)
        unhealthy = _gauge("hetsched_devices_unhealthy", "Unhealthy devices.", labels)
        allocated = _gauge(
            "hetsched_device_allocated",
            "Devices allocated to tasks, in devices (fractional shares add up).",
            labels,
        )
        ratio = _gauge(
            "hetsched_device_allocation_ratio",
            "Allocated share of the devices of a class and model, 0..1.",
            labels,
        )
        healthy = _gauge(
            "hetsched_device_healthy",
            "1 if the device is healthy, 0 if not.",
            ["node", "device", "class", "model"],
        )
        per: dict[tuple[str, str], list[int]] = {}
        for row, node in enumerate(state.nodes):
            if not state.active[row]:
                continue
            for slot, device in enumerate(node.devices):
                ok = bool(state.dev_healthy[row, slot])
                key = (device.device_class, device.model)
                count = per.setdefault(key, [0, 0, 0])
                count[0] += 1
                count[1] += 0 if ok else 1
                count[2] += SHARE_UNITS - int(state.dev_free[row, slot])
                healthy.add_metric([node.name, device.id, *key], 1.0 if ok else 0.0)
        for key, (total, bad, used) in sorted(per.items()):
            devices.add_metric(list(key), total)
            unhealthy.add_metric(list(key), bad)
            allocated.add_metric(list(key), used / SHARE_UNITS)
            ratio.add_metric(list(key), used / (total * SHARE_UNITS))
        yield from (devices, unhealthy, allocated, ratio, healthy)

    def _fragmentation(self, view: SchedulerView) -> Iterator[Metric]:
        labels = ["class", "model"]
        ratio = _gauge(
            "hetsched_fragmentation_ratio",
            "FGD fragmentation: the share of idle devices that the target workload (the "
            "pending and running jobs' task shapes) cannot use, 0..1.",
            labels,
        )
        amount = _gauge(
            "hetsched_fragmented_devices",
            "FGD fragmentation in devices: idle share the target workload cannot use.",
            labels,
        )
        state = view.cluster
        for cls in state.class_names():
            target = target_workload(view, cls)
            slots = state.device_mask(cls)
            elig = eligibility(state, target, cls)
            for model in state.models(cls):
                rows = [
                    i
                    for i, k in enumerate(state.kinds)
                    if k.device_class == cls and k.model == model
                ]
                mine = slots & np.isin(state.dev_kind, rows)
                per_node = expected_frag(state.cpu_free, state.dev_free, mine, elig, target)
                frag = float(per_node[state.active].sum())
                idle = float(np.where(mine, state.dev_free, 0).sum())
                ratio.add_metric([cls, model], frag / idle if idle else 0.0)
                amount.add_metric([cls, model], frag / SHARE_UNITS)
        yield ratio
        yield amount

    def _stranded(self, view: SchedulerView, typical: Mapping[str, Typical]) -> Iterator[Metric]:
        report = stranded_accelerators(view.cluster, typical)
        count = _gauge(
            "hetsched_stranded_accelerators",
            "Healthy, wholly free accelerators whose node lacks the CPU or memory their "
            "typical job needs beside them (docs/heterogeneity.md).",
        )
        count.add_metric([], report.stranded)
        ratio = _gauge(
            "hetsched_stranded_accelerators_ratio",
            "Stranded accelerators over the healthy accelerators of active nodes, 0..1.",
        )
        ratio.add_metric([], report.fraction)
        yield count
        yield ratio

    def _agent(
        self,
        service: Service,
        node_of: Mapping[str, str],
        devices_of: Mapping[tuple[str, int], list[tuple[str, str]]],
        running: Mapping[tuple[str, int], Placement],
    ) -> Iterator[Metric]:
        alerts = CounterMetricFamily(
            "hetsched_alerts",
            "Alerts the agent's overcommit guard raised, by kind (task_memory, node_memory, "
            "node_cpu).",
            labels=["kind"],
        )
        kills = CounterMetricFamily(
            "hetsched_guard_kills", "Best-effort tasks the overcommit guard had killed."
        )
        memory = _gauge(
            "hetsched_tasks_memory_used_bytes",
            "Measured memory of running tasks' process trees (resident plus GPU memory).",
        )
        gpu_memory = _gauge(
            "hetsched_tasks_gpu_memory_used_bytes", "Measured GPU memory of running tasks."
        )
        cpu = _gauge("hetsched_tasks_cpu_used_cores", "Measured CPU use of running tasks.")
        by_model = _gauge(
            "hetsched_device_memory_used_bytes",
            "Measured GPU memory of running tasks, by the class and model of the devices they "
            "hold (a task on several devices counts evenly on each).",
            ["class", "model"],
        )
        devices = service.loop.devices
        parts = _parts(service)
        yield _utilization(parts, devices, node_of, running)
        guards = [part for part in parts if isinstance(part, GuardLike)]
        # one series each, summed over the guards the service holds (one per machine)
        counts: Tally[str] = Tally()
        per: dict[tuple[str, str], float] = {}
        used: list[Any] = []
        for guard in guards:
            counts.update(dict(guard.counts))
            usage = dict(guard.usage)
            used += usage.values()
            for key, task in usage.items():
                held = devices_of.get(task_of_key(key), [])
                for what in held:
                    per[what] = per.get(what, 0.0) + task.gpu_memory_mib * _MIB / len(held)
        if guards:
            for kind, n in sorted(counts.items()):
                alerts.add_metric([kind], n)
            kills.add_metric([], sum(g.kills for g in guards))
            memory.add_metric([], sum(u.memory_mib for u in used) * _MIB)
            gpu_memory.add_metric([], sum(u.gpu_memory_mib for u in used) * _MIB)
            cpu.add_metric([], sum(u.cpu_milli for u in used) / 1000)
            for what, amount in sorted(per.items()):
                by_model.add_metric(list(what), amount)
        yield from (alerts, kills, memory, gpu_memory, cpu, by_model)


def _utilization(
    parts: Sequence[object],
    devices: Mapping[str, Device],
    node_of: Mapping[str, str],
    running: Mapping[tuple[str, int], Placement],
) -> Metric:
    """``hetsched_device_utilization_ratio`` of every device present (controlplane/
    utilization.py says which source wins)."""
    util = _gauge(
        "hetsched_device_utilization_ratio",
        "Measured busy share of a device, 0..1: read from the device (NVML) or estimated "
        "from the overcommit guard's measurements of the tasks that hold it.",
        ["node", "device", "class", "model", "source"],
    )
    present = {d: devices[d] for d in node_of if d in devices}
    for device_id, reading in sorted(device_utilization(parts, present, running).items()):
        device = devices[device_id]
        labels = [node_of[device_id], device_id, device.device_class, device.model]
        util.add_metric([*labels, reading.source], reading.value)
    return util


def measured_by_class(service: Service) -> dict[str, float]:
    """What the agent measured, as shares of capacity for the dashboard's chart: devices
    per class (mean busy share, see controlplane/utilization.py) and ``cpu`` (tasks' CPU use over
    the capacity of active nodes, when the guard runs). Called with the loop's lock held
    (:meth:`LoopMetrics.sample`)."""
    parts = _parts(service)
    devices = service.loop.devices
    view = service.loop.view
    state = view.cluster
    present = {
        d.id: devices[d.id]
        for n in state.nodes
        if SIMULATED_LABEL not in n.labels  # a simulated device is not measured
        for d in n.devices
        if d.id in devices
    }
    running = view.running_placements()
    capacity = int(state.cpu_cap[state.active].sum())
    sums: dict[str, list[float]] = {}
    for device_id, reading in device_utilization(parts, present, running).items():
        sums.setdefault(present[device_id].device_class, []).append(reading.value)
    out: dict[str, float] = {}
    if capacity:
        for guard in (part for part in parts if isinstance(part, GuardLike)):
            used = sum(u.cpu_milli for u in list(guard.usage.values()))
            out["cpu"] = out.get("cpu", 0.0) + used / capacity
    out.update({cls: sum(v) / len(v) for cls, v in sums.items() if v})
    return out


def render(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus' text format."""
    return generate_latest(registry)


def install(service: Service) -> CollectorRegistry:
    """Register the state collector on the service loop's registry and let the history
    read measured utilization; returns the registry ``/metrics`` renders."""
    metrics = service.loop.metrics
    metrics.registry.register(ServiceCollector(service))
    metrics.measure = lambda: measured_by_class(service)
    return metrics.registry
