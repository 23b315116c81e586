"""What the device plugin answers, as functions of the devices: which ids it prefers, which
environment, device nodes and mounts a container gets.

Ids. A device of the model (``<node>/gpu3``) is ``gpu3`` to the kubelet (device ids stay
short: the kubelet allows 63 characters, node names may be longer). A shared GPU's slots
are ``gpu3::0`` .. ``gpu3::<n-1>``: each slot is one pod's share of the device.

Nothing here talks to gRPC, the kubelet or the API server; :func:`device_nodes` reads sysfs
and procfs under the roots it is given.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hetsched.k8s.deviceplugin import api_pb2
from hetsched.model.device import SHARE_UNITS, Device, Health

__all__ = [
    "PHASE_ALLOCATED",
    "PHASE_ALLOCATING",
    "SLOT_SEPARATOR",
    "Assignment",
    "MountSpec",
    "Roots",
    "build_response",
    "control_nodes",
    "device_nodes",
    "host_index",
    "is_healthy",
    "kubelet_id",
    "physical_id",
    "preferred_devices",
    "preferred_slots",
    "slot_ids",
    "visible_env",
]

SLOT_SEPARATOR = "::"
#: values of the :data:`~hetsched.k8s.names.ASSIGN_PHASE` pod annotation (which pod an
#: Allocate is for, and whether its assignment is honoured: :mod:`.matching`)
PHASE_ALLOCATING = "allocating"
PHASE_ALLOCATED = "allocated"


def kubelet_id(device_id: str) -> str:
    """``a100-0/gpu3`` -> ``gpu3``: the id the kubelet sees for a whole device."""
    return device_id.rsplit("/", 1)[-1]


def slot_ids(device_kubelet_id: str, slots: int) -> list[str]:
    """The ids of a shared device's slots: ``gpu3::0`` .. ``gpu3::<slots-1>``."""
    return [f"{device_kubelet_id}{SLOT_SEPARATOR}{k}" for k in range(slots)]


def physical_id(any_id: str) -> str:
    """The whole device a kubelet id names: ``gpu3::2`` -> ``gpu3``, ``gpu3`` -> ``gpu3``."""
    return kubelet_id(any_id).split(SLOT_SEPARATOR, 1)[0]


# -- GetPreferredAllocation -----------------------------------------------------------------


def _attr(device: Device | None, name: str) -> object:
    return None if device is None else device.attributes.get(name)


def _id_key(kid: str) -> tuple[str, int, str]:
    """Natural order: gpu2 before gpu10."""
    head = kid.rstrip("0123456789")
    tail = kid[len(head) :]
    return (head, int(tail) if tail else -1, kid)


def preferred_devices(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    devices: Mapping[str, Device],
    chosen: Sequence[str] | None = None,
) -> list[str]:
    """The whole devices to prefer among ``available`` (kubelet ids), ``size`` of them.

    1. The scheduler's choice (``chosen``) when it fits: all available, the right size, and
       every ``must_include`` in it.
    2. Otherwise the tightest group that holds the whole request: devices of one NVLink
       domain on one NUMA node, then of one NVLink domain, then of one NUMA node. Among the
       groups that fit, the one with the fewest available devices wins (best fit), so big
       groups stay whole for big requests.
    3. Otherwise the must-include devices, then the rest by NUMA node of the first
       must-include device (or the NUMA node holding most available devices), then by id.
    """
    free = sorted(dict.fromkeys(available), key=_id_key)
    must = [d for d in dict.fromkeys(must_include) if d in free]
    if size <= 0:
        return []
    if len(free) <= size:
        return free
    if chosen is not None:
        picked = list(dict.fromkeys(chosen))
        if len(picked) == size and set(picked) <= set(free) and set(must) <= set(picked):
            return sorted(picked, key=_id_key)
    for keys in (("nvlink_domain", "numa"), ("nvlink_domain",), ("numa",)):
        groups: dict[tuple[object, ...], list[str]] = {}
        for kid in free:
            values = tuple(_attr(devices.get(kid), k) for k in keys)
            if None not in values:
                groups.setdefault(values, []).append(kid)
        fitting = [
            members
            for members in groups.values()
            if len(members) >= size and set(must) <= set(members)
        ]
        if fitting:
            best = min(fitting, key=lambda m: (len(m), _id_key(m[0])))
            rest = [d for d in best if d not in must]
            return sorted([*must, *rest[: size - len(must)]], key=_id_key)
    counts: dict[object, int] = {}
    for kid in free:
        numa = _attr(devices.get(kid), "numa")
        counts[numa] = counts.get(numa, 0) + 1
    home = (
        _attr(devices.get(must[0]), "numa")
        if must
        else max(counts, key=lambda n: (counts[n], n is not None))
    )
    rest = sorted(
        (d for d in free if d not in must),
        key=lambda d: (_attr(devices.get(d), "numa") != home, _id_key(d)),
    )
    return [*must, *rest[: size - len(must)]]


def preferred_slots(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    chosen_device: str | None = None,
) -> list[str]:
    """The shared-device slots to prefer: on the scheduler's device when it has enough free
    slots, else on the device with the fewest free slots that still holds the request (the
    most used one: other devices stay free for whole-device work), else any."""
    free = sorted(dict.fromkeys(available), key=lambda s: (_id_key(physical_id(s)), s))
    must = [s for s in dict.fromkeys(must_include) if s in free]
    if size <= 0:
        return []
    per_device: dict[str, list[str]] = {}
    for slot in free:
        per_device.setdefault(physical_id(slot), []).append(slot)
    must_devices = {physical_id(s) for s in must}
    candidates = [
        d for d, slots in per_device.items() if len(slots) >= size and must_devices <= {d}
    ]
    if candidates:
        if chosen_device is not None and physical_id(chosen_device) in candidates:
            device = physical_id(chosen_device)
        else:
            device = min(candidates, key=lambda d: (len(per_device[d]), _id_key(d)))
        rest = [s for s in per_device[device] if s not in must]
        return [*must, *rest[: size - len(must)]]
    rest = [s for s in free if s not in must]
    return [*must, *rest[: size - len(must)]]


# -- Allocate ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Assignment:
    """One device a container gets, and its share of it in milli-units (1000: whole)."""

    device: Device
    share: int = SHARE_UNITS

    @property
    def index(self) -> int:
        return host_index(self.device)


def host_index(device: Device) -> int:
    """The device's index on the host: NVML's index when the backend gave one, else the
    number in its id (``gpu3`` -> 3)."""
    value = device.attributes.get("index")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    kid = kubelet_id(device.id)
    digits = kid[len(kid.rstrip("0123456789")) :]
    return int(digits) if digits else 0


@dataclass(frozen=True, slots=True)
class MountSpec:
    host_path: str
    container_path: str
    read_only: bool = True


@dataclass(frozen=True, slots=True)
class Roots:
    """Where the host's files are (tests point these at temporary trees)."""

    dev: Path = Path("/dev")
    sysfs: Path = Path("/sys")
    proc: Path = Path("/proc")


_HOST = Roots()

#: vendor -> the environment variables that list visible devices to its runtime
_VISIBLE_ENV: dict[str, tuple[str, ...]] = {
    "nvidia": ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"),
    "amd": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"),
    "intel": ("ZE_AFFINITY_MASK",),
    "habana": ("HABANA_VISIBLE_DEVICES",),
}

#: vendor -> device nodes every container of that vendor's devices needs besides the
#: per-device ones (included when they exist on the host)
_CONTROL_NODES: dict[str, tuple[str, ...]] = {
    "nvidia": ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"),
    "amd": ("kfd",),
}


def visible_env(assignments: Sequence[Assignment]) -> dict[str, str]:
    """The environment a container gets for its devices.

    - ``HETSCHED_DEVICES``: JSON ``[{"id", "index", "share"[, "uuid"]}]``, always;
    - the vendor's visibility variables (``CUDA_VISIBLE_DEVICES`` and
      ``NVIDIA_VISIBLE_DEVICES`` for NVIDIA: UUIDs when known, which stay right whether or not
      the container runtime renumbers the GPUs it exposes; host indexes otherwise);
    - for one device shared (share below 1000): ``HETSCHED_DEVICE_SHARE`` (milli-units),
      ``HETSCHED_DEVICE_MEMORY_MIB`` (the share of the device's memory, when known) and, for
      NVIDIA, ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (the share in percent, rounded up), which
      an MPS server honours and which is a hint otherwise.
    """
    env: dict[str, str] = {}
    listed = []
    for a in assignments:
        entry: dict[str, object] = {"id": a.device.id, "index": a.index, "share": a.share}
        uuid = a.device.attributes.get("uuid")
        if uuid is not None:
            entry["uuid"] = str(uuid)
        listed.append(entry)
    env["HETSCHED_DEVICES"] = json.dumps(listed, separators=(",", ":"))
    vendors = {a.device.vendor for a in assignments}
    for vendor in sorted(vendors):
        names = _VISIBLE_ENV.get(vendor, ())
        mine = [a for a in assignments if a.device.vendor == vendor]
        for name in names:
            if vendor == "nvidia":
                values = [str(a.device.attributes.get("uuid", a.index)) for a in mine]
            else:
                values = [str(a.index) for a in mine]
            env[name] = ",".join(values)
    if len(assignments) == 1 and assignments[0].share < SHARE_UNITS:
        a = assignments[0]
        env["HETSCHED_DEVICE_SHARE"] = str(a.share)
        memory = a.device.attributes.get("memory_gib")
        if isinstance(memory, int | float) and not isinstance(memory, bool):
            env["HETSCHED_DEVICE_MEMORY_MIB"] = str(int(memory * 1024 * a.share // SHARE_UNITS))
        if a.device.vendor == "nvidia":
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(math.ceil(a.share / 10))
    return env


def _nvidia_minor(device: Device, roots: Roots) -> int:
    address = device.attributes.get("pci_address")
    if address is not None:
        info = roots.proc / "driver" / "nvidia" / "gpus" / str(address) / "information"
        try:
            for line in info.read_text().splitlines():
                if line.startswith("Device Minor:"):
                    return int(line.split(":", 1)[1])
        except (OSError, ValueError):
            pass
    return host_index(device)


def _xclmgmt_instance(address: str) -> int | None:
    """XRT's management node number: ``(domain << 16) | (bus << 8) | (slot << 3) | function``."""
    try:
        domain, bus, rest = address.split(":")
        slot, function = rest.split(".")
        return (int(domain, 16) << 16) | (int(bus, 16) << 8) | (int(slot, 16) << 3) | int(function)
    except ValueError:
        return None


def device_nodes(device: Device, roots: Roots = _HOST) -> list[str]:
    """Host paths of the device nodes one device needs.

    - a ``device_nodes`` attribute (comma-separated paths) wins: a fake or unusual device says
      what it needs;
    - NVIDIA: ``/dev/nvidia<minor>``, the minor from the driver's ``/proc`` entry for the PCI
      address (the NVML index when there is none);
    - any PCI device with DRM nodes in sysfs (AMD, Intel, FPGAs with a DRM user function):
      ``/dev/dri/card<N>`` and ``/dev/dri/renderD<N>``;
    - Xilinx: ``/dev/xclmgmt<instance>`` when it exists.
    """
    listed = device.attributes.get("device_nodes")
    if listed is not None:
        return [p.strip() for p in str(listed).split(",") if p.strip()]
    out: list[str] = []
    if device.vendor == "nvidia":
        return [f"/dev/nvidia{_nvidia_minor(device, roots)}"]
    address = device.attributes.get("pci_address")
    if address is None:
        return out
    drm = roots.sysfs / "bus" / "pci" / "devices" / str(address) / "drm"
    if drm.is_dir():
        for entry in sorted(drm.iterdir(), key=lambda p: p.name):
            if entry.name.startswith(("card", "renderD")):
                out.append(f"/dev/dri/{entry.name}")
    if device.vendor == "xilinx":
        instance = _xclmgmt_instance(str(address))
        if instance is not None and (roots.dev / f"xclmgmt{instance}").exists():
            out.append(f"/dev/xclmgmt{instance}")
    return out


def control_nodes(vendors: Iterable[str], roots: Roots = _HOST) -> list[str]:
    """The vendors' shared device nodes (``/dev/nvidiactl``, ``/dev/kfd``) that exist here."""
    out: list[str] = []
    for vendor in sorted(set(vendors)):
        for name in _CONTROL_NODES.get(vendor, ()):
            if (roots.dev / name).exists():
                out.append(f"/dev/{name}")
    return out


def build_response(
    assignments: Sequence[Assignment],
    nodes: Sequence[str],
    mounts: Sequence[MountSpec] = (),
    extra_env: Mapping[str, str] | None = None,
) -> api_pb2.ContainerAllocateResponse:
    """One container's Allocate answer: environment, device nodes (read-write-mknod, at the
    same path inside) and mounts."""
    env = visible_env(assignments)
    env.update(extra_env or {})
    response = api_pb2.ContainerAllocateResponse(envs=env)
    for path in dict.fromkeys(nodes):
        response.devices.append(
            api_pb2.DeviceSpec(container_path=path, host_path=path, permissions="rwm")
        )
    for m in mounts:
        response.mounts.append(
            api_pb2.Mount(
                container_path=m.container_path, host_path=m.host_path, read_only=m.read_only
            )
        )
    return response


def is_healthy(device: Device) -> bool:
    return device.health is Health.HEALTHY
