"""The queue tree of a profile: queues, their weights and quotas per flavor, and its checks.

A *flavor* is a dimension of usage (``hetsched.cluster.usage``): ``cpu``, ``memory``, a
device class (``gpu``) or a class and model (``gpu/A100``). Quota amounts are written in
Kubernetes notation for cpu and memory and in devices (fractions allowed) for a device
flavor, and turned into the cluster state's units by :func:`flavor_amount`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from hetsched.model.quantity import QuantityError, parse_cpu, parse_memory

__all__ = ["Amount", "QueueSpec", "check_queue_tree", "flavor_amount", "known_flavors"]

#: the units every quota amount is turned into: cpu millicores, memory MiB, and for a device
#: flavor milli-units of a device (1000 = one whole device), the units of cluster state
Amount = str | int | float


def flavor_amount(flavor: str, value: Amount) -> int:
    """A quota amount in internal units; raises ValueError (QuantityError) if invalid.

    ``cpu`` takes Kubernetes CPU notation (``500m``, ``2``), ``memory`` memory notation
    (``16Gi``); a device flavor takes a device count, fractions allowed (``0.5``).
    """
    if flavor == "cpu":
        return parse_cpu(value)
    if flavor == "memory":
        return parse_memory(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise QuantityError(f"expected a device count, got {value!r}")
    if value < 0:
        raise QuantityError(f"must not be negative, got {value!r}")
    return round(value * 1000)


class QueueSpec(BaseModel):
    """One queue of the tree: its guarantee and how much it may borrow and lend, per flavor.

    ``nominal`` is guaranteed; a flavor it does not name has a guarantee of 0. A flavor
    absent from ``borrowing_limit`` may borrow without limit (up to what others lend); one
    absent from ``lending_limit`` lends all of its idle nominal quota.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str = Field(min_length=1)
    parent: str | None = None
    weight: float = Field(default=1.0, gt=0)
    nominal: dict[str, Amount] = Field(default_factory=dict)
    borrowing_limit: dict[str, Amount] = Field(default_factory=dict)
    lending_limit: dict[str, Amount] = Field(default_factory=dict)


def known_flavors(flavors: Sequence[str]) -> set[str]:
    """cpu, memory, every declared flavor, and the device class of every ``class/model``."""
    out = {"cpu", "memory"}
    for flavor in flavors:
        out.add(flavor)
        out.add(flavor.split("/", 1)[0])
    return out


def check_queue_tree(flavors: Sequence[str], queues: Sequence[QueueSpec]) -> list[str]:
    """Every problem of a queue tree and its quotas (a profile's ``flavors`` and
    ``queues``), with field paths.

    Unknown or duplicate names, unknown parents, cycles, unknown flavors, invalid or negative
    amounts, and lending limits above the nominal quota.
    """
    errors: list[str] = []
    allowed = known_flavors(flavors)
    for index, flavor in enumerate(flavors):
        device_class, _, model = flavor.partition("/")
        if not device_class or flavor in ("cpu", "memory") or "/" in model:
            errors.append(f"flavors[{index}]: {flavor!r} is not 'class' or 'class/model'")
    names: dict[str, int] = {}
    for index, queue in enumerate(queues):
        if queue.name in names:
            errors.append(f"queues[{index}].name: queue {queue.name!r} is declared twice")
        names.setdefault(queue.name, index)
    parents = {q.name: q.parent for q in queues}
    for index, queue in enumerate(queues):
        where = f"queues[{index}]"
        if queue.parent is not None and queue.parent not in names:
            errors.append(f"{where}.parent: unknown queue {queue.parent!r}")
        seen = [queue.name]
        parent = queue.parent
        while parent is not None and parent in parents:
            if parent in seen:
                errors.append(
                    f"{where}.parent: cycle in the queue tree: {' -> '.join([*seen, parent])}"
                )
                break
            seen.append(parent)
            parent = parents[parent]
        amounts: dict[str, dict[str, int]] = {}
        for part in ("nominal", "borrowing_limit", "lending_limit"):
            amounts[part] = {}
            for flavor, value in getattr(queue, part).items():
                if flavor not in allowed:
                    known = ", ".join(sorted(allowed))
                    errors.append(
                        f"{where}.{part}.{flavor}: unknown flavor {flavor!r} (known: {known}; "
                        "declare device flavors under 'flavors')"
                    )
                    continue
                try:
                    amounts[part][flavor] = flavor_amount(flavor, value)
                except ValueError as exc:
                    errors.append(f"{where}.{part}.{flavor}: {exc}")
        for flavor, lend in amounts["lending_limit"].items():
            nominal = amounts["nominal"].get(flavor, 0)
            if lend > nominal:
                errors.append(
                    f"{where}.lending_limit.{flavor}: {queue.lending_limit[flavor]} exceeds the "
                    f"nominal quota {queue.nominal.get(flavor, 0)}"
                )
    return errors
