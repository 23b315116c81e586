"""The ``nvidia`` backend against recorded NVML answers: an object with the ``pynvml`` API
is injected in place of the library (no GPU here). The answers are those NVML gives on a
machine with two NVLink-joined H100s and an A100 in MIG mode with two instances."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sysfs import SysfsTree

from hetsched.agent.backends import DiscoveryContext, FoundDevice, create, discover
from hetsched.agent.backends.nvidia import NvidiaBackend, normalize_bus_id
from hetsched.agent.watcher import DeviceWatcher
from hetsched.model.device import Health


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


NOT_SUPPORTED, NOT_FOUND, TIMEOUT, GPU_IS_LOST, DRIVER_NOT_LOADED = 3, 6, 10, 15, 9

H100_A = "GPU-5e3c9a0f-6b1d-4d3e-9e7a-0c4f1e2d3a4b"
H100_B = "GPU-a17b2c3d-8e9f-4a0b-b1c2-d3e4f5a6b7c8"
A100 = "GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
MIG_1 = "MIG-11111111-2222-3333-4444-555555555555"
MIG_2 = "MIG-66666666-7777-8888-9999-aaaaaaaaaaaa"


@dataclass
class RecordedNvml:
    """The pynvml calls the backend makes, answering what NVML answered on that machine."""

    gpus: list[dict[str, Any]]
    xid_events: list[tuple[int, int]] = field(default_factory=list)
    init_error: int | None = None
    NVMLError: type[Exception] = NVMLError
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int = 1
    NVML_VOLATILE_ECC: int = 0
    NVML_NVLINK_MAX_LINKS: int = 18
    NVML_DEVICE_MIG_ENABLE: int = 1
    nvmlEventTypeXidCriticalError: int = 8
    registered: list[str] = field(default_factory=list)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        gpu = self.gpus[index]
        if gpu.get("lost"):
            raise NVMLError(GPU_IS_LOST)
        return gpu

    def nvmlDeviceGetUUID(self, handle: dict[str, Any]) -> str:
        return str(handle["uuid"])

    def nvmlDeviceGetName(self, handle: dict[str, Any]) -> bytes:
        return str(handle["name"]).encode()

    def nvmlDeviceGetMemoryInfo(self, handle: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(total=handle["memory"], free=handle["memory"], used=0)

    def nvmlDeviceGetCudaComputeCapability(self, handle: dict[str, Any]) -> tuple[int, int]:
        return handle["cc"]  # type: ignore[no-any-return]

    def nvmlDeviceGetPciInfo(self, handle: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(busId=handle["bus"].encode())

    def nvmlDeviceGetNumaNodeId(self, handle: dict[str, Any]) -> int:
        if "numa" not in handle:
            raise NVMLError(NOT_SUPPORTED)
        return int(handle["numa"])

    def nvmlDeviceGetTotalEccErrors(self, handle: dict[str, Any], kind: int, counter: int) -> int:
        assert (kind, counter) == (1, 0)
        if "ecc" not in handle:
            raise NVMLError(NOT_SUPPORTED)
        return int(handle["ecc"])

    def nvmlDeviceGetNvLinkState(self, handle: dict[str, Any], link: int) -> int:
        links = handle.get("links")
        if links is None or link >= len(links):
            raise NVMLError(NOT_SUPPORTED)
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: dict[str, Any], link: int) -> Any:
        return SimpleNamespace(busId=handle["links"][link].encode())

    def nvmlDeviceGetMigMode(self, handle: dict[str, Any]) -> list[int]:
        if "mig" not in handle:
            raise NVMLError(NOT_SUPPORTED)
        return [1, 1] if handle["mig"] else [0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: dict[str, Any]) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: dict[str, Any], index: int) -> Any:
        instances = handle["mig"]
        if index >= len(instances):
            raise NVMLError(NOT_FOUND)
        return instances[index]

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: dict[str, Any], types: int, events: str) -> None:
        assert (types, events) == (8, "event-set")
        self.registered.append(str(handle["uuid"]))

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> SimpleNamespace:
        if not self.xid_events:
            raise NVMLError(TIMEOUT)
        index, xid = self.xid_events.pop(0)
        return SimpleNamespace(device=self.gpus[index], eventData=xid, eventType=8)

    def nvmlDeviceGetUtilizationRates(self, handle: dict[str, Any]) -> SimpleNamespace:
        # NVML answers NotSupported for a GPU in MIG mode
        if "util" not in handle or handle.get("mig"):
            raise NVMLError(NOT_SUPPORTED)
        gpu, memory = handle["util"]
        return SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: dict[str, Any]) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in handle.get("procs", [])]


def recorded() -> RecordedNvml:
    return RecordedNvml(
        gpus=[
            {
                "uuid": H100_A,
                "name": "NVIDIA H100 80GB HBM3",
                "memory": 85520809984,
                "cc": (9, 0),
                "bus": "00000000:1B:00.0",
                "numa": 0,
                "ecc": 0,
                "links": ["00000000:43:00.0"] * 4,
                "mig": False,
                "util": (87, 41),
            },
            {
                "uuid": H100_B,
                "name": "NVIDIA H100 80GB HBM3",
                "memory": 85520809984,
                "cc": (9, 0),
                "bus": "00000000:43:00.0",
                "numa": 0,
                "ecc": 0,
                "links": ["00000000:1B:00.0"] * 4,
                "mig": False,
                "util": (0, 0),
            },
            {
                "uuid": A100,
                "name": "NVIDIA A100-SXM4-80GB",
                "memory": 85899345920,
                "cc": (8, 0),
                "bus": "00000000:B7:00.0",
                "ecc": 0,
                "mig": [
                    {
                        "uuid": MIG_1,
                        "name": "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
                        "memory": 42298834944,
                    },
                    {
                        "uuid": MIG_2,
                        "name": "NVIDIA A100-SXM4-80GB MIG 1g.10gb",
                        "memory": 10200547328,
                    },
                ],
            },
        ]
    )


def test_recorded_answers_give_gpus_with_their_attributes() -> None:
    nvml = recorded()
    found = discover(["nvidia"], nvml=nvml)
    h100 = {
        "index": 0,
        "memory_gib": 79.6,
        "compute_capability": 9.0,
        "pci_address": "0000:1b:00.0",
        "numa": 0,
        "ecc_uncorrected": 0,
        "nvlink_domain": 0,
    }
    parent = {
        "index": 2,
        "compute_capability": 8.0,
        "pci_address": "0000:b7:00.0",
        "ecc_uncorrected": 0,
        "parent_uuid": A100,
        "mig": True,
    }
    assert found == [
        FoundDevice(
            f"nvml:{H100_A}",
            "gpu",
            "nvidia",
            "H100 80GB HBM3",
            {**h100, "uuid": H100_A, "nvlink_peers": H100_B},
            Health.HEALTHY,
            "nvidia",
        ),
        FoundDevice(
            f"nvml:{H100_B}",
            "gpu",
            "nvidia",
            "H100 80GB HBM3",
            {
                **h100,
                "uuid": H100_B,
                "index": 1,
                "pci_address": "0000:43:00.0",
                "nvlink_peers": H100_A,
            },
            Health.HEALTHY,
            "nvidia",
        ),
        FoundDevice(
            f"nvml:{MIG_1}",
            "gpu",
            "nvidia",
            "A100-SXM4-80GB MIG 3g.40gb",
            {**parent, "uuid": MIG_1, "memory_gib": 39.4},
            Health.HEALTHY,
            "nvidia",
        ),
        FoundDevice(
            f"nvml:{MIG_2}",
            "gpu",
            "nvidia",
            "A100-SXM4-80GB MIG 1g.10gb",
            {**parent, "uuid": MIG_2, "memory_gib": 9.5},
            Health.HEALTHY,
            "nvidia",
        ),
    ]
    assert nvml.registered == [H100_A, H100_B, A100]


def test_ecc_errors_make_a_gpu_unhealthy() -> None:
    nvml = recorded()
    nvml.gpus[1]["ecc"] = 2
    health = {d.attributes["uuid"]: d.health for d in discover(["nvidia"], nvml=nvml)}
    assert health[H100_A] is Health.HEALTHY
    assert health[H100_B] is Health.UNHEALTHY


@pytest.mark.parametrize(
    ("events", "unhealthy"),
    [
        ([], set()),
        ([(0, 79)], {H100_A}),  # fell off the bus
        ([(1, 48)], {H100_B}),  # double-bit ECC
        ([(0, 13), (1, 43)], set()),  # application faults, not the GPU's
        ([(0, 31), (1, 94)], {H100_B}),
    ],
)
def test_critical_xids_make_a_gpu_unhealthy_and_keep_it_so(
    events: list[tuple[int, int]], unhealthy: set[str]
) -> None:
    nvml = recorded()
    backend = create("nvidia", DiscoveryContext(nvml=nvml))
    backend.discover()  # registers for events
    nvml.xid_events = list(events)
    for _ in range(2):  # sticky: the second round, with no new event, still says so
        found = backend.discover()
        assert {
            str(d.attributes["uuid"]) for d in found if d.health is Health.UNHEALTHY
        } == unhealthy


def test_a_lost_gpu_is_gone() -> None:
    nvml = recorded()
    nvml.gpus[0]["lost"] = True
    found = discover(["nvidia"], nvml=nvml)
    assert [d.attributes["uuid"] for d in found] == [H100_B, MIG_1, MIG_2]
    assert "nvlink_peers" not in found[0].attributes


def test_no_driver_is_none_found_with_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hetsched.agent.discovery")
    nvml = recorded()
    nvml.init_error = DRIVER_NOT_LOADED
    backend = create("nvidia", DiscoveryContext(nvml=nvml))
    assert backend.discover() == []
    assert backend.discover() == []
    assert [r.getMessage() for r in caplog.records] == [
        "nvidia: NVML unavailable (NVML error 9); no NVIDIA devices"
    ]


def test_the_real_library_without_a_driver_finds_none() -> None:
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver")
    # nvidia-ml-py is installed, but without libnvidia-ml NVML's init fails
    assert discover(["nvidia"]) == []


def test_nvidia_wins_over_pci_for_the_same_gpu(tmp_path: Path) -> None:
    sysfs = SysfsTree(tmp_path)
    sysfs.pci("0000:1b:00.0", 0x10DE, 0x2330, 0x030200, numa=0)
    sysfs.pci("0000:43:00.0", 0x10DE, 0x2330, 0x030200, numa=0)
    sysfs.pci("0000:c1:00.0", 0x1002, 0x740C, 0x038000, numa=1)
    nvml = recorded()
    del nvml.gpus[2]
    found = discover(["nvidia", "pci"], sysfs_root=tmp_path, nvml=nvml)
    assert [(d.key, d.source) for d in found] == [
        (f"nvml:{H100_A}", "nvidia"),
        (f"nvml:{H100_B}", "nvidia"),
        ("pci:0000:c1:00.0", "pci"),
    ]


def test_per_process_gpu_memory() -> None:
    nvml = recorded()
    nvml.gpus[0]["procs"] = [(4242, 1 << 30)]
    nvml.gpus[1]["procs"] = [(4242, 2 << 30), (77, 5)]
    backend = NvidiaBackend(DiscoveryContext(nvml=nvml))
    assert backend.process_memory() == {4242: 3 << 30, 77: 5}


@pytest.mark.parametrize(
    ("bus", "address"),
    [("00000000:1B:00.0", "0000:1b:00.0"), (b"00000001:C1:00.0", "0001:c1:00.0")],
)
def test_bus_ids_read_as_sysfs_writes_them(bus: str | bytes, address: str) -> None:
    assert normalize_bus_id(bus) == address


def test_busy_share_of_whole_gpus() -> None:
    nvml = recorded()
    # NVML's percentages as shares; the A100 in MIG mode is left out (NotSupported)
    backend = NvidiaBackend(DiscoveryContext(nvml=nvml))
    assert backend.utilization() == {f"nvml:{H100_A}": 0.87, f"nvml:{H100_B}": 0.0}
    nvml.gpus[0]["lost"] = True
    assert backend.utilization() == {f"nvml:{H100_B}": 0.0}
    assert NvidiaBackend(DiscoveryContext(nvml=RecordedNvml([], init_error=9))).utilization() == {}


def test_the_watcher_reports_busy_share_by_device_id() -> None:
    nvml = recorded()
    watcher = DeviceWatcher.create("node-a", ["nvidia"], nvml=nvml)
    node = watcher.initial()
    ids = {d.attributes["uuid"]: d.id for d in node.devices}
    assert watcher.utilization() == {ids[H100_A]: 0.87, ids[H100_B]: 0.0}
    # a GPU gone from the bus has no reading, and no stale one is kept
    nvml.gpus[1]["lost"] = True
    watcher.poll()
    assert watcher.utilization() == {ids[H100_A]: 0.87}
