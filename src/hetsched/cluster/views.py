"""Reading the cluster's topology: names to rows, device masks per class and selector, counts
per class and model, and a memo of values derived from topology, labels or health.

Everything here reads; nothing changes capacity. Values depend on the state's ``version``
(nodes, devices, health), never on free capacity, so they are cached until it moves.
:class:`~hetsched.cluster.state.ClusterState` is built on :class:`TopologyViews`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from hetsched.cluster.kinds import DeviceKind
from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.keys import TaskKey
from hetsched.model.device import Device, Node
from hetsched.model.selector import matches

__all__ = ["TopologyViews"]

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
SlotArray = npt.NDArray[np.int32]
_T = TypeVar("_T")


class TopologyViews:
    """The lookups of a cluster state (see the module docstring)."""

    nodes: list[Node]
    node_index: dict[str, int]
    #: device id -> (node row, slot)
    device_index: dict[str, tuple[int, int]]
    kinds: list[DeviceKind]
    active: BoolArray
    dev_free: SlotArray
    dev_kind: SlotArray
    dev_healthy: BoolArray
    allocations: dict[TaskKey | str, Placement]
    version: int
    _memo: dict[Hashable, Any]
    _memo_version: int
    _all_active: bool
    _all_active_version: int

    def row(self, name: str) -> int:
        try:
            return self.node_index[name]
        except KeyError:
            raise KeyError(f"unknown node {name!r}") from None

    def _device(self, device_id: str) -> tuple[int, int]:
        try:
            return self.device_index[device_id]
        except KeyError:
            raise KeyError(f"unknown device {device_id!r}") from None

    def device_id(self, row: int, slot: int) -> str:
        return self.nodes[row].devices[slot].id

    def device_mask(self, device_class: str, selector: str | None = None) -> BoolArray:
        """Slots holding a healthy device of ``device_class`` that ``selector`` admits.

        Cached per (class, selector) until the topology or health changes; selectors are
        evaluated once per device kind, not per device.
        """
        return self.memo(
            ("device_mask", device_class, selector),
            lambda: self._device_mask(device_class, selector),
        )

    def _device_mask(self, device_class: str, selector: str | None) -> BoolArray:
        per_kind = np.array(
            [
                k.device_class == device_class
                and (selector is None or matches(selector, k.attributes))
                for k in self.kinds
            ]
            + [False],  # row -1: absent slot
            dtype=np.bool_,
        )
        mask = np.asfortranarray(per_kind[self.dev_kind] & self.dev_healthy & self.active[:, None])
        mask.flags.writeable = False
        return mask

    def all_active(self) -> bool:
        """Whether every node row is active (no node was removed); cached per version (read
        at every placement: an attribute check, not a memo lookup)."""
        if self._all_active_version != self.version:
            self._all_active = bool(self.active.all())
            self._all_active_version = self.version
        return self._all_active

    def memo(self, key: Hashable, compute: Callable[[], _T]) -> _T:
        """A value derived from topology, labels or health, cached until ``version`` changes.

        For masks that plugins would otherwise recompute every attempt (label and taint
        matches, selector matches). Never for anything that depends on free capacity.
        """
        if self._memo_version != self.version:
            self._memo = {}
            self._memo_version = self.version
        try:
            return self._memo[key]  # type: ignore[no-any-return]
        except KeyError:
            value = self._memo[key] = compute()
            return value

    def class_names(self) -> list[str]:
        return sorted({k.device_class for k in self.kinds})

    def models(self, device_class: str) -> list[str]:
        return sorted({k.model for k in self.kinds if k.device_class == device_class})

    def device_count(self, device_class: str, model: str | None = None) -> int:
        """Healthy devices of a class (and model) on active nodes."""
        per_kind = np.array(
            [
                k.device_class == device_class and (model is None or k.model == model)
                for k in self.kinds
            ]
            + [False]
        )
        return int((per_kind[self.dev_kind] & self.dev_healthy & self.active[:, None]).sum())

    def allocated_devices(self) -> Iterator[tuple[TaskKey | str, DeviceShare]]:
        for key, placement in self.allocations.items():
            for d in placement.devices:
                yield key, d

    def device_of(self, device_id: str) -> Device:
        row, slot = self._device(device_id)
        return self.nodes[row].devices[slot]

    def free_share(self, device_id: str) -> int:
        return int(self.dev_free[self._device(device_id)])
