"""The ``nvidia`` backend: NVIDIA GPUs through NVML (the ``pynvml`` module of nvidia-ml-py).

Per GPU: UUID, model, memory, compute capability, NUMA node, PCI address, NVLink peers (and
an ``nvlink_domain``: GPUs joined by NVLink, directly or not, share one), and health. A GPU
with MIG enabled is offered as its MIG instances, each a ``gpu`` of its own with the parent's
UUID. Health turns unhealthy on volatile uncorrected ECC errors, on a critical XID event
(NVML's event set, drained at every discovery round; XIDs that only say an application
failed are ignored, as NVIDIA's device plugin does) and when NVML reports the GPU lost.

Without nvidia-ml-py, or without a driver, it answers "none found" and logs one line. Tests
inject an object with the ``pynvml`` API that returns recorded answers
(:attr:`DiscoveryContext.nvml`).
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from typing import Any

from hetsched.agent.backends.base import DiscoveryContext, FoundDevice
from hetsched.model.device import AttrValue, Health

__all__ = ["APPLICATION_XIDS", "NvidiaBackend", "normalize_bus_id"]

log = logging.getLogger("hetsched.agent.discovery")

#: XIDs caused by an application rather than the GPU (NVIDIA's device plugin skips these)
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
_GIB = 1 << 30


def normalize_bus_id(bus_id: str | bytes) -> str:
    """NVML's ``00000000:3B:00.0`` as sysfs writes it: ``0000:3b:00.0``."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    domain, _, rest = text.strip().lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}"


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class NvidiaBackend:
    context: DiscoveryContext
    name: str = "nvidia"
    fallback: bool = False
    _nvml: Any = None
    _ready: bool | None = None
    _said: set[str] = field(default_factory=set)
    _events: Any = None
    #: UUIDs whose XID events are registered with the event set
    _registered: set[str] = field(default_factory=set)
    #: UUID -> the critical XIDs seen on it (sticky: a GPU that raised one stays unhealthy)
    xids: dict[str, list[int]] = field(default_factory=dict)

    # -- NVML --------------------------------------------------------------------------

    def _init(self) -> Any:
        """The NVML module, initialised once; None when there is no library or driver."""
        if self._ready is not None:
            return self._nvml if self._ready else None
        nvml = self.context.nvml
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError:
                self._ready = False
                self._say("nvidia: nvidia-ml-py is not installed; no NVIDIA devices")
                return None
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError: no libnvidia-ml, no driver, no device
            self._ready = False
            self._say(f"nvidia: NVML unavailable ({exc}); no NVIDIA devices")
            return None
        self._nvml = nvml
        self._ready = True
        try:
            self._events = nvml.nvmlEventSetCreate()
        except Exception:
            self._events = None
        return nvml

    def discover(self) -> list[FoundDevice]:
        nvml = self._init()
        if nvml is None:
            return []
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            self._say(f"nvidia: cannot count devices ({exc}); none found")
            return []
        gpus: list[tuple[int, Any, dict[str, AttrValue], str, Health]] = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            except Exception as exc:
                # a GPU that fell off the bus answers GPU_IS_LOST here: it is gone
                self._say(f"nvidia: GPU {index} does not answer ({exc})")
                continue
            self._register_events(nvml, handle, uuid)
            attributes, model, health = self._describe(nvml, handle, index, uuid)
            gpus.append((index, handle, attributes, model, health))
        self._drain_events(nvml)
        self._nvlink(nvml, gpus)
        out: list[FoundDevice] = []
        for _index, handle, attributes, model, health in gpus:
            uuid = str(attributes["uuid"])
            if self.xids.get(uuid):
                health = Health.UNHEALTHY
                attributes["xid"] = self.xids[uuid][-1]
            instances = self._mig(nvml, handle, attributes, model, health)
            if instances is not None:
                out += instances
                continue
            out.append(
                FoundDevice(f"nvml:{uuid}", "gpu", "nvidia", model, attributes, health, self.name)
            )
        return out

    def _describe(
        self, nvml: Any, handle: Any, index: int, uuid: str
    ) -> tuple[dict[str, AttrValue], str, Health]:
        model = _text(nvml.nvmlDeviceGetName(handle)).removeprefix("NVIDIA ").strip()
        attributes: dict[str, AttrValue] = {"uuid": uuid, "index": index}
        health = Health.HEALTHY
        memory = _try(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        if memory is not None:
            attributes["memory_gib"] = round(int(memory.total) / _GIB, 1)
        capability = _try(lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle))
        if capability is not None:
            major, minor = capability
            attributes["compute_capability"] = float(f"{major}.{minor}")
        pci = _try(lambda: nvml.nvmlDeviceGetPciInfo(handle))
        if pci is not None:
            attributes["pci_address"] = normalize_bus_id(pci.busId)
        numa = _try(lambda: nvml.nvmlDeviceGetNumaNodeId(handle))
        if numa is None and "pci_address" in attributes:
            numa = _sysfs_numa(self.context, str(attributes["pci_address"]))
        if numa is not None and int(numa) >= 0:
            attributes["numa"] = int(numa)
        ecc = _try(
            lambda: nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
            )
        )
        if ecc is not None:
            attributes["ecc_uncorrected"] = int(ecc)
            if int(ecc) > 0:
                health = Health.UNHEALTHY
        return attributes, model, health

    def _nvlink(
        self, nvml: Any, gpus: list[tuple[int, Any, dict[str, AttrValue], str, Health]]
    ) -> None:
        """``nvlink_peers`` (UUIDs of the GPUs at the other end of active links) and
        ``nvlink_domain`` (the lowest index among the GPUs NVLink joins, directly or not)."""
        by_address = {str(a.get("pci_address")): a for _, _, a, _, _ in gpus}
        peers: dict[str, set[str]] = {}
        max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
        for _, handle, attributes, _, _ in gpus:
            uuid = str(attributes["uuid"])
            for link in range(max_links):
                try:
                    if not nvml.nvmlDeviceGetNvLinkState(handle, link):
                        continue
                    remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
                except Exception:
                    break  # NotSupported / InvalidArgument: no (more) links
                peer = by_address.get(normalize_bus_id(remote.busId))
                if peer is not None:
                    peers.setdefault(uuid, set()).add(str(peer["uuid"]))
                    peers.setdefault(str(peer["uuid"]), set()).add(uuid)
        index_of = {str(a["uuid"]): i for i, _, a, _, _ in gpus}
        for _, _, attributes, _, _ in gpus:
            uuid = str(attributes["uuid"])
            if uuid not in peers:
                continue
            attributes["nvlink_peers"] = ",".join(sorted(peers[uuid]))
            seen, todo = {uuid}, [uuid]
            while todo:
                for other in peers.get(todo.pop(), ()):
                    if other not in seen:
                        seen.add(other)
                        todo.append(other)
            attributes["nvlink_domain"] = min(index_of[u] for u in seen)

    def _mig(
        self,
        nvml: Any,
        handle: Any,
        parent: dict[str, AttrValue],
        model: str,
        health: Health,
    ) -> list[FoundDevice] | None:
        """The MIG instances of a GPU in MIG mode, or None when MIG is off (or unsupported)."""
        mode = _try(lambda: nvml.nvmlDeviceGetMigMode(handle))
        if mode is None or int(mode[0]) != int(getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)):
            return None
        out: list[FoundDevice] = []
        slots = _try(lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(handle)) or 0
        for slot in range(int(slots)):
            mig = _try(lambda s=slot: nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, s))
            if mig is None:
                continue  # an empty slot answers NotFound
            uuid = _text(nvml.nvmlDeviceGetUUID(mig))
            attributes: dict[str, AttrValue] = {
                k: v for k, v in parent.items() if k not in ("uuid", "memory_gib", "nvlink_peers")
            }
            attributes.update({"uuid": uuid, "parent_uuid": str(parent["uuid"]), "mig": True})
            memory = _try(lambda m=mig: nvml.nvmlDeviceGetMemoryInfo(m))
            if memory is not None:
                attributes["memory_gib"] = round(int(memory.total) / _GIB, 1)
            name = _try(lambda m=mig: nvml.nvmlDeviceGetName(m))
            mig_model = _text(name).removeprefix("NVIDIA ").strip() if name else f"{model} MIG"
            out.append(
                FoundDevice(
                    f"nvml:{uuid}", "gpu", "nvidia", mig_model, attributes, health, self.name
                )
            )
        return out

    # -- XID events --------------------------------------------------------------------

    def _register_events(self, nvml: Any, handle: Any, uuid: str) -> None:
        if self._events is None or uuid in self._registered:
            return
        self._registered.add(uuid)
        try:
            nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._events)
        except Exception:
            return  # not supported on this GPU (or MIG): no XID events from it

    def _drain_events(self, nvml: Any) -> None:
        if self._events is None:
            return
        for _ in range(1024):
            try:
                event = nvml.nvmlEventSetWait_v2(self._events, 0)
            except Exception:
                return  # Timeout: nothing (more) pending
            xid = int(event.eventData)
            if xid in APPLICATION_XIDS:
                continue
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(event.device))
            except Exception:
                continue
            self.xids.setdefault(uuid, []).append(xid)

    # -- per-process memory (the overcommit guard) ---------------------------------------

    def process_memory(self) -> dict[int, int]:
        """pid -> bytes of GPU memory it uses, summed over GPUs; {} without NVML."""
        nvml = self._init()
        if nvml is None:
            return {}
        out: dict[int, int] = {}
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception:
            return {}
        for index in range(count):
            processes = _try(
                lambda i=index: nvml.nvmlDeviceGetComputeRunningProcesses(
                    nvml.nvmlDeviceGetHandleByIndex(i)
                )
            )
            for process in processes or []:
                used = getattr(process, "usedGpuMemory", None)
                if used is not None:
                    out[int(process.pid)] = out.get(int(process.pid), 0) + int(used)
        return out

    # -- busy share (the measured utilization metric) ---------------------------------

    def utilization(self) -> dict[str, float]:
        """Device key -> the share of NVML's last sample period (1/6 s to 1 s, by model) in
        which a kernel ran on the GPU, 0..1; {} without NVML. Whole GPUs only: NVML does not
        report the busy share of MIG instances (it answers NotSupported in MIG mode), so a
        GPU in MIG mode and its instances are left out, as is a GPU that does not answer."""
        nvml = self._init()
        if nvml is None:
            return {}
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception:
            return {}
        out: dict[str, float] = {}
        for index in range(count):
            rates = _try(lambda i=index: self._rates(nvml, i))
            if rates is not None:
                uuid, busy = rates
                out[f"nvml:{uuid}"] = min(1.0, max(0.0, busy / 100))
        return out

    @staticmethod
    def _rates(nvml: Any, index: int) -> tuple[str, float] | None:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        mode = _try(lambda: nvml.nvmlDeviceGetMigMode(handle))
        if mode is not None and int(mode[0]) == int(getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)):
            return None
        rates = nvml.nvmlDeviceGetUtilizationRates(handle)
        return _text(nvml.nvmlDeviceGetUUID(handle)), float(rates.gpu)

    def _say(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            log.info(line)


def _try(call: Any) -> Any:
    """The call's answer, or None when NVML says it does not support or know it."""
    try:
        return call()
    except Exception:
        return None


def _sysfs_numa(context: DiscoveryContext, address: str) -> int | None:
    try:
        return int(
            (context.sysfs_root / "bus" / "pci" / "devices" / address / "numa_node").read_text()
        )
    except (OSError, ValueError):
        return None
