"""What a replay measures while it runs: capacity and use per resource over time, and each
user's dominant share integrated while the user has jobs in the system.

Resources are labelled ``cpu`` (millicores) or by device model (``V100``; the class when a
device has no model), in milli-units of share. The engine calls :meth:`Accounts.use` when a
task starts and again when its allocation is freed, and :meth:`Accounts.sample` after every
step.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from hetsched.cluster.placement import Placement
from hetsched.cluster.stranding import StrandingMeter
from hetsched.framework.profile import ProfileSpec
from hetsched.model.device import SHARE_UNITS, Health, Node
from hetsched.plugins.stranding import profile_typicals

__all__ = ["Accounts", "TimeSeries", "device_label"]


def device_label(device_class: str, model: str) -> str:
    """The resource label of a device: its model, or its class when it has none."""
    return model or device_class


def _floats() -> array[float]:
    return array("d")


def _ints() -> array[int]:
    return array("q")


@dataclass(slots=True)
class TimeSeries:
    """Samples taken after every step: time, queue length, running jobs, use per resource.

    ``used`` and ``capacity`` map a resource label (``cpu``, or a device model such as
    ``V100``) to values per sample: millicores for CPU, milli-units for devices. Each
    series is a typed array (8 bytes a sample, a replay takes a few per job), a sequence
    that numpy reads without a copy (``np.frombuffer``); ``list(...)`` gives a list.
    """

    time: array[float] = field(default_factory=_floats)
    queued: array[int] = field(default_factory=_ints)
    running: array[int] = field(default_factory=_ints)
    used: dict[str, array[int]] = field(default_factory=dict)
    capacity: dict[str, array[int]] = field(default_factory=dict)
    #: stranded accelerators / healthy accelerators (cluster/stranding.py), per sample
    stranded: array[float] = field(default_factory=_floats)


class Accounts:
    """Capacity, use and fairness of one replay (see the module docstring)."""

    def __init__(self, nodes: list[Node], profile: ProfileSpec | None = None) -> None:
        self._nodes: dict[str, Node] = {}
        self._stranding = StrandingMeter(typical=profile_typicals(profile))
        self._device_label: dict[str, str] = {}
        self._device_node: dict[str, str] = {}
        self._unhealthy: set[str] = set()
        self._removed: set[str] = set()
        self._used: dict[str, int] = {"cpu": 0}
        self._cap: dict[str, int] = {"cpu": 0}
        self.series = TimeSeries(used={"cpu": _ints()}, capacity={"cpu": _ints()})
        for node in nodes:
            self.add_capacity(node)
        #: resource label -> capacity at the start
        self.initial = dict(self._cap)
        #: device class -> devices at the start
        self.class_devices: dict[str, int] = {}
        for node in nodes:
            for device in node.devices:
                cls = device.device_class
                self.class_devices[cls] = self.class_devices.get(cls, 0) + 1
        # fairness: per-user current use and the integral of the dominant share
        self._user_used: dict[str, dict[str, int]] = {}
        self._user_jobs: dict[str, int] = {}
        self._user_mark: dict[str, float] = {}
        self._user_share: dict[str, float] = {}
        #: per user: the integral over time of its dominant share while it had jobs in the
        #: system, and the length of that time
        self.user_integral: dict[str, float] = {}
        self.user_active: dict[str, float] = {}

    # -- capacity ------------------------------------------------------------------------

    def add_capacity(self, node: Node) -> None:
        self._nodes[node.name] = node
        self._stranding.add_node(node)
        self._removed.discard(node.name)
        self._cap["cpu"] = self._cap.get("cpu", 0) + node.cpu_milli
        for device in node.devices:
            label = device_label(device.device_class, device.model)
            self._device_label[device.id] = label
            self._device_node[device.id] = node.name
            self._used.setdefault(label, 0)
            if label not in self._cap:
                self._cap[label] = 0
                # a model first seen mid-run had nothing before
                self.series.used[label] = array("q", bytes(8 * len(self.series.time)))
                self.series.capacity[label] = array("q", bytes(8 * len(self.series.time)))
            if device.health is Health.HEALTHY:
                self._cap[label] += SHARE_UNITS
            else:
                self._unhealthy.add(device.id)

    def remove_capacity(self, name: str) -> None:
        node = self._nodes.get(name)
        if node is None or name in self._removed:
            return
        self._removed.add(name)
        self._stranding.remove_node(name)
        self._cap["cpu"] -= node.cpu_milli
        for device in node.devices:
            if device.id not in self._unhealthy:
                self._cap[self._device_label[device.id]] -= SHARE_UNITS

    def health(self, device_id: str, health: Health) -> None:
        label = self._device_label.get(device_id)
        if label is None or self._device_node[device_id] in self._removed:
            return
        self._stranding.set_health(device_id, health is Health.HEALTHY)
        if health is Health.HEALTHY and device_id in self._unhealthy:
            self._unhealthy.discard(device_id)
            self._cap[label] += SHARE_UNITS
        elif health is not Health.HEALTHY and device_id not in self._unhealthy:
            self._unhealthy.add(device_id)
            self._cap[label] -= SHARE_UNITS

    # -- use -----------------------------------------------------------------------------

    def use(self, placement: Placement, user: str, sign: int, now: float) -> None:
        """A task took (``sign`` +1) or gave back (-1) ``placement``."""
        used = self._used
        self._stranding.use(placement, sign)
        mine = self._user_used.setdefault(user, {})
        used["cpu"] += sign * placement.cpu_milli
        mine["cpu"] = mine.get("cpu", 0) + sign * placement.cpu_milli
        for share in placement.devices:
            label = self._device_label[share.device_id]
            used[label] += sign * share.share
            mine[label] = mine.get(label, 0) + sign * share.share
        if user in self._user_mark:
            self._settle(user, now)
        self._user_share[user] = self._dominant(user)

    def sample(self, now: float, queued: int, running: int) -> None:
        series = self.series
        series.time.append(now)
        series.queued.append(queued)
        series.running.append(running)
        series.stranded.append(self._stranding.fraction)
        for label, values in series.used.items():
            values.append(self._used[label])
            series.capacity[label].append(self._cap[label])

    # -- fairness: dominant share integrated while a user has jobs in the system ---------

    def users_present(self) -> int:
        return len(self._user_mark)

    def _dominant(self, user: str) -> float:
        used = self._user_used.get(user)
        if not used:
            return 0.0
        cap = self.initial
        return max((v / cap[k] for k, v in used.items() if cap.get(k)), default=0.0)

    def _settle(self, user: str, now: float) -> None:
        mark = self._user_mark.get(user)
        if mark is not None:
            span = now - mark
            self.user_integral[user] = (
                self.user_integral.get(user, 0.0) + self._user_share.get(user, 0.0) * span
            )
            self.user_active[user] = self.user_active.get(user, 0.0) + span
        self._user_mark[user] = now

    def user_enter(self, user: str, now: float) -> None:
        count = self._user_jobs.get(user, 0)
        if count == 0:
            self._user_mark[user] = now
            self.user_integral.setdefault(user, 0.0)
            self.user_active.setdefault(user, 0.0)
            self._user_share[user] = self._dominant(user)
        self._user_jobs[user] = count + 1

    def user_leave(self, user: str, now: float) -> None:
        count = self._user_jobs.get(user, 0) - 1
        self._user_jobs[user] = count
        if count == 0:
            self._settle(user, now)
            del self._user_mark[user]

    def close(self, now: float) -> None:
        for user in list(self._user_mark):
            self._settle(user, now)
