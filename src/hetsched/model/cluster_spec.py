"""Cluster files: the pydantic models of ``nodes:`` (the one statement of their rules) and
the nodes they build.

A node entry with ``replicas`` is that many nodes, ``{i}`` in its name numbered from 0;
devices are numbered per class across the entry's groups (two groups of 2 GPUs give
gpu0..gpu3).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from pydantic import Field, ValidationError, model_validator

from hetsched.model.device import AttrValue, Device, Health, Node, Taint, TaintEffect
from hetsched.model.spec_common import SpecError, Strict, format_errors
from hetsched.model.spec_values import Cpu, Memory
from hetsched.model.topology_spec import TopologyTreeSpec

__all__ = [
    "ClusterSpec",
    "DeviceGroupSpec",
    "NodeSpec",
    "TaintSpec",
    "node_entry",
    "number_devices",
    "parse_cluster",
    "validate_cluster",
]


class DeviceGroupSpec(Strict):
    device_class: str = Field(alias="class", min_length=1)
    vendor: str = ""
    model: str = ""
    count: int = Field(default=1, ge=1, le=1024)
    attributes: dict[str, AttrValue] = Field(default_factory=dict)
    health: Health = Health.HEALTHY


def number_devices(groups: Iterable[DeviceGroupSpec]) -> Iterator[tuple[DeviceGroupSpec, int]]:
    """Each device of the groups with its index within its class, counting from 0 across
    groups (two groups of 2 GPUs give gpu0..gpu3): the index device ids end in."""
    per_class: dict[str, int] = {}
    for group in groups:
        for _ in range(group.count):
            index = per_class.get(group.device_class, 0)
            per_class[group.device_class] = index + 1
            yield group, index


class TaintSpec(Strict):
    key: str = Field(min_length=1)
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE


@lru_cache(maxsize=1024)
def _suffixes(cls: str, start: int, count: int) -> tuple[str, ...]:
    """``/gpu4``, ``/gpu5``, ...: what device ids add to their node's name."""
    return tuple(f"/{cls}{i}" for i in range(start, start + count))


#: one group of a node's devices as the nodes are built from it: id suffixes, class,
#: vendor, model, attributes (read-only, shared by the group's devices), health
_Layout = tuple[tuple[str, ...], str, str, str, Mapping[str, AttrValue], Health]


class NodeSpec(Strict):
    name: str = Field(min_length=1)
    replicas: int | None = Field(default=None, ge=1, le=100_000)
    cpu_milli: Cpu = Field(alias="cpu")
    memory_mib: Memory = Field(alias="memory")
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)
    devices: list[DeviceGroupSpec] = Field(default_factory=list)

    def _layout(self) -> list[_Layout]:
        layout: list[_Layout] = []
        per_class: dict[str, int] = {}
        for g in self.devices:
            start = per_class.get(g.device_class, 0)
            per_class[g.device_class] = start + g.count
            suffixes = _suffixes(g.device_class, start, g.count)
            frozen = MappingProxyType(dict(g.attributes))
            layout.append((suffixes, g.device_class, g.vendor, g.model, frozen, g.health))
        return layout

    def expand(self) -> list[Node]:
        """The nodes of this entry (see the module docstring)."""
        layout = self._layout()
        taints = tuple(Taint(t.key, t.value, t.effect) for t in self.taints)
        name = self.name
        names = (
            [name]
            if self.replicas is None
            else [name.replace("{i}", str(i)) for i in range(self.replicas)]
        )
        return [
            Node(
                n,
                self.cpu_milli,
                self.memory_mib,
                tuple(
                    [Device(n + at, c, v, m, a, h) for ats, c, v, m, a, h in layout for at in ats]
                ),
                self.labels,
                taints,
            )
            for n in names
        ]


class ClusterSpec(Strict):
    nodes: list[NodeSpec] = Field(min_length=1)
    #: network levels, node labels broadest first (:mod:`hetsched.model.topology`)
    topology: TopologyTreeSpec | None = None

    def levels(self) -> tuple[str, ...]:
        return () if self.topology is None else tuple(self.topology.levels)

    @model_validator(mode="after")
    def _replicas_need_pattern(self) -> ClusterSpec:
        for node in self.nodes:
            if node.replicas is not None and node.replicas > 1 and "{i}" not in node.name:
                raise ValueError(f"node {node.name!r}: replicas > 1 needs '{{i}}' in the name")
        return self

    def build(self) -> list[Node]:
        nodes = [n for spec in self.nodes for n in spec.expand()]
        seen: set[str] = set()
        for index, node in enumerate(nodes):
            if node.name in seen:
                raise SpecError([f"nodes: duplicate node name {node.name!r} (node #{index})"])
            seen.add(node.name)
        return nodes


def validate_cluster(data: Any, source: str = "") -> ClusterSpec:
    """The validated model of a cluster document; SpecError naming every problem."""
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_errors(exc), source) from None


def parse_cluster(data: Any, source: str = "") -> list[Node]:
    """The nodes of a cluster document; SpecError naming every problem."""
    return validate_cluster(data, source).build()


def node_entry(node: Node) -> dict[str, Any]:
    """``node`` as a cluster-file entry that builds it again: one device group per device,
    in the order of its devices (ids ``NAME/CLASS<i>`` come back as they were when the
    node's devices were numbered so; see :func:`number_devices`)."""
    entry: dict[str, Any] = {
        "name": node.name,
        "cpu": f"{node.cpu_milli}m",
        "memory": f"{node.memory_mib}Mi",
    }
    if node.labels:
        entry["labels"] = dict(node.labels)
    if node.taints:
        entry["taints"] = [
            {"key": t.key, "value": t.value, "effect": t.effect.value} for t in node.taints
        ]
    devices = []
    for device in node.devices:
        group: dict[str, Any] = {"class": device.device_class}
        if device.vendor:
            group["vendor"] = device.vendor
        if device.model:
            group["model"] = device.model
        if device.attributes:
            group["attributes"] = dict(device.attributes)
        if device.health is not Health.HEALTHY:
            group["health"] = device.health.value
        devices.append(group)
    if devices:
        entry["devices"] = devices
    return entry
