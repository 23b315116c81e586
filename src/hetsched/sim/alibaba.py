"""Loader for the Alibaba GPU cluster trace v2023 ("openb"): node and pod lists (CSV).

Nodes: ``sn, cpu_milli, memory_mib, gpu, model``; each GPU becomes a device of class
``gpu`` with the node's model. Pods: ``name, cpu_milli, memory_mib, num_gpu, gpu_milli``
and optionally ``gpu_spec`` (``|``-separated allowed models, empty for any), which becomes
the selector ``device.attributes["model"] in [...]``. Other columns (qos, phase, times) are
ignored: the fragmentation experiment has no time dimension.

Input is validated here, at the boundary: every problem is a :class:`TraceError` naming the
file, the line (1 = the header) and the field.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from hetsched.model.device import SHARE_UNITS, Device, Node
from hetsched.model.job import DeviceRequest, TaskRequest

__all__ = [
    "NODE_FILE",
    "TraceError",
    "TracePod",
    "load_nodes",
    "load_pods",
    "model_selector",
    "pod_file",
]

NODE_FILE = "openb_node_list_gpu_node.csv"
_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
_POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(ValueError):
    """A trace file that does not load: ``file:line: field 'x': problem``."""

    def __init__(self, path: Path, line: int, field: str, problem: str) -> None:
        # line 0: the file as a whole (missing, unreadable)
        where = f"{path}:{line}: field {field!r}" if line else str(path)
        super().__init__(f"{where}: {problem}")
        self.path = path
        self.line = line
        self.field = field


def pod_file(trace_dir: Path, trace: str) -> Path:
    """The pod list of trace ``trace`` (``default``, ``gpuspec33``, ...)."""
    return trace_dir / f"openb_pod_list_{trace}.csv"


def model_selector(models: Iterable[str]) -> str:
    """The device selector admitting exactly ``models`` (sorted, duplicates dropped)."""
    names = ", ".join(f'"{m}"' for m in sorted(set(models)))
    return f'device.attributes["model"] in [{names}]'


@dataclass(frozen=True, slots=True)
class TracePod:
    """One pod of a pod list. ``gpu_milli`` is per GPU; ``gpu_spec`` is the raw field."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: str = ""

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(sorted({m for m in self.gpu_spec.split("|") if m}))

    @property
    def gpu_total_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    def request(self) -> TaskRequest:
        devices: tuple[DeviceRequest, ...] = ()
        if self.num_gpu:
            selector = model_selector(self.models) if self.models else None
            devices = (DeviceRequest.of("gpu", self.num_gpu, self.gpu_milli, selector),)
        return TaskRequest(self.cpu_milli, self.memory_mib, devices)


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    if not path.is_file():
        raise TraceError(path, 0, "", "no such file")
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        for column in required:
            if column not in header:
                raise TraceError(path, 1, column, f"missing column (header: {','.join(header)})")
        for row in reader:
            yield reader.line_num, row


def _int(path: Path, line: int, row: dict[str, str], field: str, low: int = 0) -> int:
    text = (row.get(field) or "").strip()
    try:
        value = int(text)
    except ValueError:
        raise TraceError(path, line, field, f"not an integer: {text!r}") from None
    if value < low:
        raise TraceError(path, line, field, f"must be >= {low}, got {value}")
    return value


def load_nodes(path: Path, gpu_only: bool = True) -> list[Node]:
    """Nodes of a node list; with ``gpu_only`` the nodes without GPUs are left out."""
    nodes: list[Node] = []
    seen: set[str] = set()
    for line, row in _rows(path, _NODE_COLUMNS):
        name = (row.get("sn") or "").strip()
        if not name:
            raise TraceError(path, line, "sn", "empty node name")
        if name in seen:
            raise TraceError(path, line, "sn", f"duplicate node {name!r}")
        seen.add(name)
        cpu = _int(path, line, row, "cpu_milli")
        memory = _int(path, line, row, "memory_mib")
        gpus = _int(path, line, row, "gpu")
        model = (row.get("model") or "").strip()
        if gpus and not model:
            raise TraceError(path, line, "model", f"node with {gpus} GPUs has no model")
        if gpu_only and not gpus:
            continue
        devices = tuple(Device(f"{name}/gpu{i}", "gpu", model=model) for i in range(gpus))
        nodes.append(Node(name, cpu, memory, devices))
    if not nodes:
        raise TraceError(path, 1, "sn", "no GPU nodes")
    return nodes


class _ModelCheck:
    def __init__(self, models: Iterable[str] | None) -> None:
        self.known = None if models is None else frozenset(models)

    @cached_property
    def listing(self) -> str:
        return ", ".join(sorted(self.known or ()))


def load_pods(path: Path, models: Iterable[str] | None = None) -> list[TracePod]:
    """Pods of a pod list, in file order.

    ``models``: the GPU models of the cluster; a ``gpu_spec`` naming any other model is an
    error (a typo would otherwise make the pod silently unschedulable).
    """
    check = _ModelCheck(models)
    pods: list[TracePod] = []
    for line, row in _rows(path, _POD_COLUMNS):
        name = (row.get("name") or "").strip()
        if not name:
            raise TraceError(path, line, "name", "empty pod name")
        cpu = _int(path, line, row, "cpu_milli")
        memory = _int(path, line, row, "memory_mib")
        num_gpu = _int(path, line, row, "num_gpu")
        gpu_milli = _int(path, line, row, "gpu_milli")
        if gpu_milli > SHARE_UNITS:
            raise TraceError(path, line, "gpu_milli", f"must be <= {SHARE_UNITS}, got {gpu_milli}")
        if num_gpu and not gpu_milli:
            raise TraceError(path, line, "gpu_milli", f"0 with num_gpu {num_gpu}")
        if num_gpu > 1 and gpu_milli < SHARE_UNITS:
            raise TraceError(
                path, line, "gpu_milli", f"a share ({gpu_milli}) needs num_gpu 1, got {num_gpu}"
            )
        spec = (row.get("gpu_spec") or "").strip()
        if spec:
            parts = spec.split("|")
            if any(not p for p in parts):
                raise TraceError(path, line, "gpu_spec", f"empty model name in {spec!r}")
            unknown = sorted({p for p in parts if check.known is not None and p not in check.known})
            if unknown:
                raise TraceError(
                    path,
                    line,
                    "gpu_spec",
                    f"unknown GPU model {', '.join(unknown)} (cluster has: {check.listing})",
                )
        pods.append(TracePod(name, cpu, memory, num_gpu, gpu_milli if num_gpu else 0, spec))
    return pods
