"""A batch of new nodes, worked out before the cluster state changes: the first duplicate
name or device id (so that a refused batch changes nothing), and the device slots to write.

Both are plain functions of the batch and of what the state already holds; the state
(:meth:`hetsched.cluster.state.ClusterState.add_nodes`) applies the result.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass, field

from hetsched.model.device import AttrValue, Device, Health, Node

__all__ = ["SlotWrites", "first_duplicate", "slot_writes"]


def first_duplicate(
    batch: list[Node], ids: list[str], live: Callable[[str], bool], known_ids: Container[str]
) -> str | None:
    """The error naming the first duplicate node name or device id of ``batch`` (in node
    order, a node's name before its devices), or None. ``ids`` are the batch's device ids
    in order, ``live`` tells whether a node name is taken by an active node, ``known_ids``
    holds the device ids of the state."""
    names = {n.name for n in batch}
    unique = set(ids)
    if (
        len(names) == len(batch)
        and len(unique) == len(ids)
        and not any(live(name) for name in names)
        and not any(i in known_ids for i in unique)
    ):
        return None
    seen_names: set[str] = set()
    seen_ids: set[str] = set()
    for node in batch:
        if node.name in seen_names or live(node.name):
            return f"node {node.name} already exists"
        seen_names.add(node.name)
        for device in node.devices:
            if device.id in seen_ids or device.id in known_ids:
                return f"device id {device.id} already exists"
            seen_ids.add(device.id)
    return None


@dataclass(slots=True)
class SlotWrites:
    """Every device of a batch, in order: its (row, slot) for the device index, and the
    columns to write into the slot matrices."""

    where: list[tuple[int, int]] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)
    healthy: list[bool] = field(default_factory=list)


#: a device's kind by its content (class, vendor, model, attribute items in order)
_Content = tuple[str, str, str, tuple[tuple[str, AttrValue], ...]]


def slot_writes(batch: list[Node], first: int, kind_row: Callable[[Device], int]) -> SlotWrites:
    """The slots of ``batch``'s devices (rows from ``first``), ``kind_row`` giving a
    device's kind row. Devices of one kind usually share their attribute map, so a kind is
    worked out once per map (and once per equal map: nodes parsed one by one each have
    their own), and a node whose devices are all healthy and of one kind (the usual node)
    is written as a run of slots."""
    out = SlotWrites()
    known: dict[tuple[str, str, str, int], int] = {}
    alike: dict[_Content, int] = {}

    def kind_of(device: Device) -> int:
        seen = (device.device_class, device.vendor, device.model, id(device.attributes))
        kind = known.get(seen)
        if kind is None:
            content = (*seen[:3], tuple(device.attributes.items()))
            kind = alike.get(content)
            if kind is None:
                kind = alike[content] = kind_row(device)
            known[seen] = kind
        return kind

    healthy_state = Health.HEALTHY
    for row, node in enumerate(batch, first):
        devices = node.devices
        if not devices:
            continue
        span = range(len(devices))
        out.where += zip([row] * len(devices), span, strict=True)
        lead = devices[0]
        kind = kind_of(lead)
        if all(
            d.health is healthy_state
            and d.attributes is lead.attributes
            and d.device_class == lead.device_class
            and d.vendor == lead.vendor
            and d.model == lead.model
            for d in devices
        ):
            out.rows += [row] * len(devices)
            out.slots += span
            out.kinds += [kind] * len(devices)
            out.healthy += [True] * len(devices)
            continue
        for slot, device in enumerate(devices):
            out.rows.append(row)
            out.slots.append(slot)
            out.kinds.append(kind_of(device))
            out.healthy.append(device.health is healthy_state)
    return out
