"""A builder for directory trees laid out like ``/sys``, so the discovery parsers run on the
real layout: device directories under ``devices/``, and the ``bus/`` and ``class/`` views as
relative symbolic links into them, as the kernel makes them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["SysfsTree"]


class SysfsTree:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _link(self, link: Path, target: Path) -> None:
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(target, link.parent), link)

    @staticmethod
    def _write(directory: Path, **files: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (directory / name).write_text(text + "\n")

    def pci(
        self,
        address: str,
        vendor: int,
        device: int,
        pci_class: int,
        numa: int = -1,
        host_bridge: str = "pci0000:00",
        port: str = "0000:00:01.0",
    ) -> Path:
        """A PCI function behind a root port: its directory (the real path)."""
        path = self.root / "devices" / host_bridge / port / address
        self._write(
            path,
            vendor=f"0x{vendor:04x}",
            device=f"0x{device:04x}",
            **{"class": f"0x{pci_class:06x}"},
            numa_node=str(numa),
        )
        self._link(self.root / "bus" / "pci" / "devices" / address, path)
        return path

    def drm_card(self, card: str, pci_device: Path, vram_bytes: int) -> None:
        """An amdgpu DRM card: VRAM size in the PCI device's directory, as the driver puts it."""
        (pci_device / "mem_info_vram_total").write_text(f"{vram_bytes}\n")
        card_dir = pci_device / "drm" / card
        card_dir.mkdir(parents=True)
        self._link(card_dir / "device", pci_device)
        self._link(self.root / "class" / "drm" / card, card_dir)

    def fpga_manager(self, name: str, parent: Path, manager: str, state: str) -> None:
        path = parent / "fpga_manager" / name
        self._write(path, name=manager, state=state)
        self._link(self.root / "class" / "fpga_manager" / name, path)

    def fpga_region(self, name: str, parent: Path) -> None:
        path = parent / "fpga_region" / name
        path.mkdir(parents=True)
        self._link(self.root / "class" / "fpga_region" / name, path)

    def platform(self, name: str) -> Path:
        path = self.root / "devices" / "platform" / name
        path.mkdir(parents=True)
        return path

    def numa_node(self, index: int, cpulist: str, mem_kib: int) -> None:
        path = self.root / "devices" / "system" / "node" / f"node{index}"
        self._write(
            path,
            cpulist=cpulist,
            meminfo=f"Node {index} MemTotal:       {mem_kib} kB\nNode {index} MemFree: 1 kB",
        )

    def unplug(self, address: str) -> None:
        """The function disappears: its bus link and its directory go, as on removal."""
        link = self.root / "bus" / "pci" / "devices" / address
        target = link.resolve()
        link.unlink()
        shutil.rmtree(target)
