"""The nodes of a Ray cluster as hetsched nodes, and their changes as core events.

:class:`RayInventory` polls Ray's node table (``ray.nodes()``, the public path: Ray has no
public subscription to node changes) every ``interval_s``:

- a Ray node that is alive and schedulable (not labelled ``hetsched.io/schedulable=false``,
  and with CPUs) is probed: hetsched's own discovery runs once as a Ray task pinned to it
  (hard node affinity, no CPU or GPU requested); when the answer comes back the node becomes
  ``NodeAdded``. With ``hetsched.io/discovery=ray`` no probe runs: the devices are Ray's
  logical GPUs (``GPU``, the model from ``accelerator_type:*`` or ``hetsched.io/gpu-model``);
- from then on the node's agent watches its devices (:mod:`hetsched.ray.nodedevices`, the
  discovery of ``hetsched up`` run on the node every ``--watch-interval``) and reports each
  changed answer (:meth:`RayInventory.report`); what changed becomes ``DeviceAdded`` and
  ``DeviceHealthChanged`` events, as the local device watcher reports them (a device keeps
  its id across rounds, one that disappears is ``removed``). Until its agent has answered,
  a node is probed again every ``refresh_s``;
- a node that Ray reports dead (or forgets) becomes ``NodeRemoved(name, "Ray node died
  (<Ray's reason>)")``.

A node is seen dead ``interval_s`` after Ray declares it so. Ray declares a raylet that exits
cleanly dead at once, and one that crashes after its health checks fail (``hetsched ray
local``: about 3 s; Ray's defaults: about 15 s; see docs/ray.md).

Nodes are named by their ``hetsched.io/node`` label, else their hostname. A name already
taken by another Ray node (a raylet restarted under the same label gets a new Ray node id, and
the core keeps the ids of a removed node's devices) gets the Ray node id's first 8 characters
appended: ``a100-0-1f2e3d4c``. Device ids are ``<node>/<class><index>``.

CPU and memory are Ray's ``CPU`` and ``memory`` resources (what the operator gave
``ray start``), else what the probe measured.

Thread safety: :meth:`poll` runs in one thread at a time (the inventory's own, after
:meth:`start`); the lookups (:meth:`node_id`, :meth:`name_of`, :meth:`nodes`, :meth:`view`)
may be called from any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hetsched.agent.backends import FoundDevice
from hetsched.agent.watcher import DeviceState, DeviceWatcher
from hetsched.model.device import Node
from hetsched.ray import _api, labels
from hetsched.ray.probe import found_from_dict, parse_backends, probe
from hetsched.scheduler.events import Event, NodeAdded, NodeRemoved

__all__ = ["RayInventory", "logical_devices"]

log = logging.getLogger(__name__)


def logical_devices(
    resources: Mapping[str, float], node_labels: Mapping[str, str]
) -> list[FoundDevice]:
    """Ray's logical GPUs as devices: ``GPU`` of them, the model from an
    ``accelerator_type:<MODEL>`` resource, else the ``hetsched.io/gpu-model`` label."""
    count = int(resources.get("GPU", 0))
    models = [k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")]
    model = models[0] if len(models) == 1 else node_labels.get(labels.GPU_MODEL, "")
    return [
        FoundDevice(f"ray:gpu{i}", "gpu", labels.vendor_of(model), model, source="ray")
        for i in range(count)
    ]


@dataclass(slots=True)
class _Answer:
    """A discovery backend that answers what the node's probe last said."""

    found: list[FoundDevice] = field(default_factory=list)
    name: str = "ray-probe"
    fallback: bool = False

    def discover(self) -> list[FoundDevice]:
        return list(self.found)


@dataclass(slots=True)
class _Tracked:
    """One Ray node hetsched knows of."""

    node_id: str
    name: str
    resources: dict[str, float]
    labels: dict[str, str]
    #: backend names for the probe; None: Ray's logical devices, no probe
    backends: list[str] | None
    answer: _Answer = field(default_factory=_Answer)
    watcher: DeviceWatcher | None = None
    #: the node as added (its devices as first found); None until the first answer
    base: Node | None = None
    probe: Any = None
    probe_started: float = 0.0
    next_probe: float = 0.0
    #: its agent reports its devices: no more probes
    from_agent: bool = False


@dataclass
class RayInventory:
    #: seconds between looks at Ray's node table (the thread started by :meth:`start`): half
    #: a second keeps a crashed raylet's jobs within 3 s of its death with `hetsched ray
    #: local`'s health checks (bench/ray_node_death.py)
    interval_s: float = 0.5
    #: seconds between two discoveries of a node
    refresh_s: float = 60.0
    #: a probe that has not answered by then is cancelled and tried again later
    probe_timeout_s: float = 60.0
    #: after a probe failed or timed out
    retry_s: float = 10.0
    _tracked: dict[str, _Tracked] = field(default_factory=dict)
    #: hetsched name -> Ray node id, every name ever given (names are never reused)
    _names: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: held while a node's watcher takes an answer (the probes' thread, the agents' reports)
    _watching: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _remote_probe: Any = None
    #: when the rounds began to fail (monotonic), None while they succeed
    failing_since: float | None = None

    # -- lookups (any thread) --------------------------------------------------------------

    def node_id(self, name: str) -> str | None:
        """The Ray node id of a hetsched node that is in the cluster now."""
        with self._lock:
            node_id = self._names.get(name)
            tracked = self._tracked.get(node_id or "")
            return node_id if tracked is not None and tracked.base is not None else None

    def name_of(self, node_id: str) -> str | None:
        with self._lock:
            tracked = self._tracked.get(node_id)
            return tracked.name if tracked is not None else None

    def nodes(self) -> list[Node]:
        """The nodes added and not removed, with their devices as last discovered (one no
        longer found is unhealthy): what a core built from scratch starts from."""
        with self._lock:
            return [
                t.watcher.current(t.base)
                for t in self._tracked.values()
                if t.base is not None and t.watcher is not None
            ]

    def view(self) -> list[DeviceState]:
        """What discovery last said of every device of the nodes added and not removed (for
        the API's node view: why a device is unhealthy or gone)."""
        with self._lock:
            watchers = [t.watcher for t in self._tracked.values() if t.watcher is not None]
        return [state for watcher in watchers for state in watcher.view()]

    def discovery(self, node_id: str) -> list[str] | None:
        """The discovery backends of a Ray node's device watch ([]: the node's environment
        decides); None for a node whose devices are Ray's resources, or one not known."""
        with self._lock:
            tracked = self._tracked.get(node_id)
            return None if tracked is None or tracked.backends is None else list(tracked.backends)

    def report(self, node_id: str, found: list[dict[str, Any]]) -> list[Event]:
        """A node agent's device answer (:mod:`hetsched.ray.nodedevices`): the events for what
        changed, as a local device watcher reports them. From then on the agent's answers
        replace the periodic probe of that node. Any thread."""
        with self._lock:
            tracked = self._tracked.get(node_id)
        if tracked is None or tracked.watcher is None:
            return []
        with self._watching:
            tracked.from_agent = True
            _cancel(tracked.probe)
            tracked.probe = None
            tracked.answer.found = [found_from_dict(d) for d in found]
            return tracked.watcher.poll()

    # -- one round -------------------------------------------------------------------------

    def poll(self, now: float | None = None) -> list[Event]:
        """One look at Ray's node table and at the probes' answers: the events for what
        changed since the last round. Never blocks on a probe."""
        now = time.time() if now is None else now
        table = {str(n["NodeID"]): n for n in _api.nodes()}
        events: list[Event] = []
        events += self._removed(table)
        events += self._joined(table, now)
        events += self._answers(now)
        self._probe_due(now)
        return events

    def initial(self, timeout_s: float = 60.0) -> list[Node]:
        """Poll until every schedulable node has answered its first probe (or ``timeout_s``
        passed); the nodes found. Nodes that answer later come as ``NodeAdded`` from
        :meth:`poll`."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll()
            with self._lock:
                waiting = [t.name for t in self._tracked.values() if t.base is None]
            if not waiting:
                break
            if time.monotonic() > deadline:
                log.warning("nodes not discovered in %g s: %s", timeout_s, ", ".join(waiting))
                break
            time.sleep(0.1)
        return self.nodes()

    def _removed(self, table: Mapping[str, Mapping[str, Any]]) -> list[Event]:
        events: list[Event] = []
        for node_id in list(self._tracked):
            entry = table.get(node_id)
            if entry is not None and entry["Alive"]:
                continue
            with self._lock:
                tracked = self._tracked.pop(node_id)
            _cancel(tracked.probe)
            message = str(entry.get("DeathReasonMessage") or "") if entry is not None else ""
            reason = "Ray node died" + (f" ({message})" if message else "")
            if entry is None:
                reason = "Ray node is gone"
            log.info("node %s (%s): %s", tracked.name, node_id, reason)
            if tracked.base is not None:
                events.append(NodeRemoved(tracked.name, reason))
        return events

    def _joined(self, table: Mapping[str, Mapping[str, Any]], now: float) -> list[Event]:
        events: list[Event] = []
        for node_id in sorted(table):
            entry = table[node_id]
            if node_id in self._tracked or not entry["Alive"]:
                continue
            node_labels = {str(k): str(v) for k, v in (entry.get("Labels") or {}).items()}
            if entry.get("NodeManagerAddress"):  # where its tasks are reached, unless told
                node_labels.setdefault(labels.ADDRESS, str(entry["NodeManagerAddress"]))
            resources = {str(k): float(v) for k, v in (entry.get("Resources") or {}).items()}
            if node_labels.get(labels.SCHEDULABLE, "").lower() == "false":
                continue
            if resources.get("CPU", 0) <= 0:
                continue
            try:
                backends = _backends_of(node_labels)
            except ValueError as exc:
                log.warning("Ray node %s: %s; not offered", node_id, exc)
                continue
            name = self._name(node_id, entry, node_labels)
            tracked = _Tracked(node_id, name, resources, node_labels, backends)
            with self._lock:
                self._tracked[node_id] = tracked
            if backends is None:
                tracked.answer.found = logical_devices(resources, node_labels)
                events += self._first_answer(tracked, {})
            else:
                self._start_probe(tracked, now)
        return events

    def _name(self, node_id: str, entry: Mapping[str, Any], node_labels: Mapping[str, str]) -> str:
        base = (
            node_labels.get(labels.NODE)
            or str(entry.get("NodeManagerHostname") or "")
            or str(entry.get("NodeName") or "")
            or node_id[:12]
        )
        base = base.replace("/", "-")
        name = base
        with self._lock:
            if self._names.get(name, node_id) != node_id:
                name = f"{base}-{node_id[:8]}"
            self._names[name] = node_id
        return name

    def _answers(self, now: float) -> list[Event]:
        pending = {t.probe: t for t in self._tracked.values() if t.probe is not None}
        if not pending:
            return []
        import ray

        ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
        events: list[Event] = []
        for ref in ready:
            tracked = pending.pop(ref)
            tracked.probe = None
            try:
                answer: dict[str, Any] = ray.get(ref)
            except Exception as exc:
                log.warning("node %s: discovery failed: %s", tracked.name, _short(exc))
                tracked.next_probe = now + self.retry_s
                continue
            tracked.next_probe = now + self.refresh_s
            with self._watching:
                if tracked.from_agent:
                    continue  # the agent's answers are newer
                tracked.answer.found = [found_from_dict(d) for d in answer["found"]]
                if tracked.base is None:
                    events += self._first_answer(tracked, answer)
                elif tracked.watcher is not None:
                    events += tracked.watcher.poll()
        for tracked in pending.values():
            if now - tracked.probe_started > self.probe_timeout_s:
                log.warning(
                    "node %s: discovery did not answer in %g s; cancelled, trying again in %g s",
                    tracked.name,
                    self.probe_timeout_s,
                    self.retry_s,
                )
                _cancel(tracked.probe)
                tracked.probe = None
                tracked.next_probe = now + self.retry_s
        return events

    def _first_answer(self, tracked: _Tracked, answer: Mapping[str, Any]) -> list[Event]:
        watcher = DeviceWatcher(tracked.name, [tracked.answer])
        cpus = tracked.resources.get("CPU") or float(answer.get("cpus", 0))
        memory = tracked.resources.get("memory")
        memory_mib = int(memory) // (1 << 20) if memory else int(answer.get("memory_mib", 0))
        node = watcher.initial(cpu_milli=int(cpus * 1000), memory_mib=memory_mib)
        node = replace(node, labels=dict(tracked.labels))
        gpus = sum(1 for d in node.devices if d.device_class == "gpu")
        if gpus != int(tracked.resources.get("GPU", 0)):
            log.warning(
                "node %s: Ray declares %d GPUs, discovery found %d; hetsched uses discovery's",
                tracked.name,
                int(tracked.resources.get("GPU", 0)),
                gpus,
            )
        with self._lock:
            tracked.watcher = watcher
            tracked.base = node
        log.info("node %s (%s) added: %d devices", tracked.name, tracked.node_id, len(node.devices))
        return [NodeAdded(node)]

    def _probe_due(self, now: float) -> None:
        for tracked in self._tracked.values():
            probed = tracked.backends is not None and not tracked.from_agent
            if probed and tracked.probe is None and now >= tracked.next_probe:
                self._start_probe(tracked, now)

    def _start_probe(self, tracked: _Tracked, now: float) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self._remote_probe is None:
            import ray

            self._remote_probe = ray.remote(probe)
        tracked.probe = self._remote_probe.options(
            num_cpus=0,
            num_gpus=0,
            max_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(tracked.node_id, soft=False),
        ).remote(tracked.backends)
        tracked.probe_started = now
        tracked.next_probe = now + self.refresh_s

    # -- the thread ------------------------------------------------------------------------

    def start(self, sink: Callable[[list[Event]], None]) -> None:
        """Poll every ``interval_s`` in a thread; events go to ``sink`` (from that thread)."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(sink,), name="hetsched-ray-nodes", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self, sink: Callable[[list[Event]], None]) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                events = self.poll()
            except Exception as exc:
                self._failed(exc)
                continue
            if self.failing_since is not None:
                log.warning(
                    "Ray's node table answers again after %.1f s",
                    time.monotonic() - self.failing_since,
                )
                self.failing_since = None
            if events:
                sink(events)

    def _failed(self, exc: Exception) -> None:
        """A round that failed (the Ray head gone, most often): said once per outage, not at
        every round; the nodes are kept as they were until Ray answers again."""
        if self.failing_since is None:
            self.failing_since = time.monotonic()
            log.warning(
                "Ray's node table does not answer (%s): the nodes are kept as they were "
                "until it does",
                _short(exc),
            )
        else:
            log.debug("Ray node inventory round failed: %s", _short(exc))


def _backends_of(node_labels: Mapping[str, str]) -> list[str] | None:
    """The probe's backends from the node's label: None for ``ray`` (no probe), [] when the
    label is absent (the probe decides: the node's environment, else the defaults)."""
    value = node_labels.get(labels.DISCOVERY, "").strip()
    if value == "ray":
        return None
    return parse_backends(value) if value else []


def _cancel(ref: Any) -> None:
    if ref is None:
        return
    import ray

    try:
        ray.cancel(ref, force=True)
    except Exception as exc:  # already done, or its node is gone
        log.debug("cancelling a probe: %s", exc)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__
