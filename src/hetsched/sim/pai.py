"""Loader for the machine list of the Alibaba PAI GPU cluster trace 2020.

``pai_machine_spec.csv`` has no header line; its columns are ``machine, gpu_type,
cap_cpu, cap_mem, cap_gpu`` (CPU cores, GB of memory, GPUs). Each machine becomes a node
with ``cap_gpu`` devices of class ``gpu`` and model ``gpu_type`` (``CPU`` machines have
none). The trace's job tables are not part of the data at hand, so this is a cluster
inventory: 1,897 machines, 6,742 GPUs of five types, in 2- and 8-GPU servers.

``scale`` keeps a fraction of the machines of each (type, CPU, memory, GPUs) shape, the
first ones in file order (at least one of each shape), so a small cluster has the same
mix of servers as the whole one. Problems are :class:`~hetsched.sim.alibaba.TraceError`
naming the file, the line and the field.
"""

from __future__ import annotations

import csv
from pathlib import Path

from hetsched.model.device import Device, Node
from hetsched.sim.alibaba import TraceError

__all__ = ["MACHINE_FILE", "load_machines"]

MACHINE_FILE = "pai_machine_spec.csv"
_COLUMNS = ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")


def _int(path: Path, line: int, field: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise TraceError(path, line, field, f"not an integer: {text.strip()!r}") from None
    if value < 0:
        raise TraceError(path, line, field, f"must be >= 0, got {value}")
    return value


def _node(path: Path, line: int, row: list[str]) -> Node:
    if len(row) != len(_COLUMNS):
        raise TraceError(path, line, "row", f"expected {len(_COLUMNS)} fields, got {len(row)}")
    name, model = row[0].strip(), row[1].strip()
    if not name:
        raise TraceError(path, line, "machine", "empty machine name")
    if not model:
        raise TraceError(path, line, "gpu_type", "empty GPU type")
    cpu = _int(path, line, "cap_cpu", row[2])
    memory = _int(path, line, "cap_mem", row[3])
    gpus = _int(path, line, "cap_gpu", row[4])
    if gpus and model == "CPU":
        raise TraceError(path, line, "cap_gpu", f"a CPU machine with {gpus} GPUs")
    devices = tuple(Device(f"{name}/gpu{i}", "gpu", model=model) for i in range(gpus))
    return Node(name, cpu * 1000, memory * 1024, devices)


def load_machines(path: Path, scale: float = 1.0, gpu_only: bool = False) -> list[Node]:
    """The machines of ``path`` as nodes (``scale`` of each shape; ``gpu_only``: leave out
    machines without GPUs), in file order."""
    if not 0.0 < scale <= 1.0:
        raise ValueError(f"scale: expected 0 < scale <= 1, got {scale}")
    if not path.is_file():
        raise TraceError(path, 0, "", "no such file")
    nodes: list[Node] = []
    seen: set[str] = set()
    with open(path, encoding="utf-8", newline="") as handle:
        for line, row in enumerate(csv.reader(handle), start=1):
            node = _node(path, line, row)
            if node.name in seen:
                raise TraceError(path, line, "machine", f"duplicate machine {node.name!r}")
            seen.add(node.name)
            if node.devices or not gpu_only:
                nodes.append(node)
    if not nodes:
        raise TraceError(path, 1, "machine", "no machines")
    return _scaled(nodes, scale) if scale < 1.0 else nodes


def _shape(node: Node) -> tuple[str, int, int, int]:
    model = node.devices[0].model if node.devices else "CPU"
    return model, node.cpu_milli, node.memory_mib, len(node.devices)


def _scaled(nodes: list[Node], scale: float) -> list[Node]:
    """The first ``scale`` of each shape's machines (at least one), in file order."""
    counts: dict[tuple[str, int, int, int], int] = {}
    for node in nodes:
        shape = _shape(node)
        counts[shape] = counts.get(shape, 0) + 1
    keep = {shape: max(1, round(n * scale)) for shape, n in counts.items()}
    out: list[Node] = []
    for node in nodes:
        shape = _shape(node)
        if keep[shape] > 0:
            keep[shape] -= 1
            out.append(node)
    return out
