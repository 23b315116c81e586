"""The ``cpu`` backend: the host's cores, memory and NUMA nodes.

One entry per NUMA node, from ``<sysfs>/devices/system/node/node<N>/{cpulist,meminfo}``;
a machine without that directory is one NUMA node with what psutil reports. Entries have the
class ``cpu`` (:data:`HOST_CLASS`): they size the node, they are not schedulable devices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import psutil

from hetsched.agent.backends.base import HOST_CLASS, DiscoveryContext, FoundDevice

__all__ = ["CpuBackend", "parse_cpulist"]

_NODE_DIR = re.compile(r"^node(\d+)$")
_MEMTOTAL = re.compile(r"MemTotal:\s*(\d+)\s*kB")
_VENDORS = {"GenuineIntel": "intel", "AuthenticAMD": "amd", "HygonGenuine": "hygon"}


def parse_cpulist(text: str) -> list[int]:
    """CPUs of a sysfs list (``0-3,8,10-11``); an empty list for an empty text."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


@dataclass
class CpuBackend:
    context: DiscoveryContext
    name: str = "cpu"
    fallback: bool = False

    def discover(self) -> list[FoundDevice]:
        vendor, model = self._cpuinfo()
        root = self.context.sysfs_root / "devices" / "system" / "node"
        entries: list[FoundDevice] = []
        nodes = sorted(
            (int(m.group(1)), path)
            for path in (root.iterdir() if root.is_dir() else ())
            if (m := _NODE_DIR.match(path.name))
        )
        for numa, path in nodes:
            cpus = parse_cpulist(_read(path / "cpulist"))
            match = _MEMTOTAL.search(_read(path / "meminfo"))
            memory_mib = int(match.group(1)) // 1024 if match else 0
            entries.append(self._entry(numa, len(cpus), memory_mib, vendor, model))
        if not entries:
            cores = psutil.cpu_count(logical=True) or 1
            memory_mib = psutil.virtual_memory().total // (1 << 20)
            entries.append(self._entry(0, cores, memory_mib, vendor, model))
        return entries

    def _entry(
        self, numa: int, cores: int, memory_mib: int, vendor: str, model: str
    ) -> FoundDevice:
        return FoundDevice(
            key=f"cpu:numa{numa}",
            device_class=HOST_CLASS,
            vendor=vendor,
            model=model,
            attributes={"numa": numa, "cores": cores, "memory_mib": memory_mib},
            source=self.name,
        )

    def _cpuinfo(self) -> tuple[str, str]:
        vendor = model = ""
        for line in _read(self.context.proc_root / "cpuinfo").splitlines():
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "vendor_id" and not vendor:
                vendor = _VENDORS.get(value, value.lower())
            elif key == "model name" and not model:
                model = value
        return vendor, model


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
