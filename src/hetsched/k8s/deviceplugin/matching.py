"""Which pod an Allocate is for, and whether its assignment is honoured: pure functions.

The kubelet's ``Allocate`` names device ids, never the pod. The scheduler wrote its choice
on the pod (``hetsched.io/assigned-devices``, with ``hetsched.io/assigned-for:
<node>/<pod uid>``), and ``GetPreferredAllocation`` steered the kubelet to it. An
assignment is honoured only when all of these hold:

1. it was written for this node and for this very pod: ``assigned-for`` names the node the
   plugin serves and the pod's own uid (an annotation copied onto another pod, or left from
   an earlier pod of the same name, names another uid);
2. every device it names is a device of this node, by its full id (``n1/gpu3``; a device
   of another node is never handed out, whatever its short name);
3. the pod is the one the kubelet is admitting: when the kubelet's pod-resources API is
   available, the pod it lists with fewer devices of the resource than the pod asks for
   (the kubelet admits one pod at a time, so that is exactly one pod); without it, any pod
   on the node with an assignment for this resource that no Allocate took yet;
4. the kubelet chose the assigned devices: its ids are among the devices assigned for this
   resource and not handed out yet (for a shared slot, the slot's device is the assigned
   one).

A container always gets the devices the kubelet chose, never others: the kubelet counts
those as taken, and would hand a substituted device to another container. When the
assignment is honoured it adds the shares (a slot's share of its device); when it is not,
whole devices are the kubelet's and a slot is its even part of its device (1000 / the
configured slots per device: 250 with 4), and the plugin says so in an Event on the pod
whose assignment was passed over (on the Node when it cannot tell which pod).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hetsched.k8s.deviceplugin.publisher import PodView
from hetsched.k8s.names import ASSIGNED_DEVICES, ASSIGNED_FOR, DEFAULT_SLOT_SHARE, DOMAIN
from hetsched.model.device import SHARE_UNITS

__all__ = [
    "ALLOCATED_PREFIX",
    "AssignedDevice",
    "Decision",
    "Pending",
    "allocated_key",
    "decide",
    "parse_assigned",
    "pending",
    "preferred",
    "slot_share",
]

#: Pod annotation prefix the plugin marks a resource handed out with:
#: ``allocated.hetsched.io/<resource kind>: <device ids>`` (one key per resource, so the
#: plugins of several classes on a node never overwrite each other's marks)
ALLOCATED_PREFIX = f"allocated.{DOMAIN}"

SLOT_SEPARATOR = "::"


def allocated_key(resource: str) -> str:
    """``hetsched.io/gpu-shared`` -> ``allocated.hetsched.io/gpu-shared``."""
    return f"{ALLOCATED_PREFIX}/{resource.rsplit('/', 1)[-1]}"


def _short(device_id: str) -> str:
    """``n1/gpu3`` -> ``gpu3``; ``gpu3::2`` -> ``gpu3``."""
    return device_id.rsplit("/", 1)[-1].split(SLOT_SEPARATOR, 1)[0]


def _class_of(device_id: str) -> str:
    return _short(device_id).rstrip("0123456789")


@dataclass(frozen=True, slots=True)
class AssignedDevice:
    """One entry of the scheduler's :data:`~hetsched.k8s.names.ASSIGNED_DEVICES` annotation;
    ``resource`` is empty in annotations written before entries named it."""

    id: str
    share: int = SHARE_UNITS
    resource: str = ""


def parse_assigned(value: str) -> list[AssignedDevice] | None:
    """The annotation's ``[{"id", "share"[, "resource"]}]``; None when it is not that shape."""
    try:
        data = json.loads(value)
    except ValueError:
        return None
    if not isinstance(data, list):
        return None
    out: list[AssignedDevice] = []
    for item in data:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            return None
        share = item.get("share", SHARE_UNITS)
        if isinstance(share, bool) or not isinstance(share, int) or not 0 < share <= SHARE_UNITS:
            return None
        resource = item.get("resource", "")
        if not isinstance(resource, str):
            return None
        out.append(AssignedDevice(item["id"], share, resource))
    return out


def _for_resource(
    entries: Sequence[AssignedDevice], resource: str, device_class: str | None, shared: bool
) -> list[AssignedDevice]:
    """The entries of ``resource``: by their resource when they name one, else (older
    annotations) by class and by whether the share is a part of a device."""
    out = []
    for entry in entries:
        if entry.resource:
            if entry.resource == resource:
                out.append(entry)
        elif (device_class is None or _class_of(entry.id) == device_class) and shared == (
            entry.share < SHARE_UNITS
        ):
            out.append(entry)
    return out


@dataclass(frozen=True, slots=True)
class Pending:
    """A pod on the node whose assignment for the resource is not handed out yet."""

    pod: PodView
    #: the entries for this resource not handed out yet, in the scheduler's order
    entries: tuple[AssignedDevice, ...]
    #: why the assignment cannot be honoured whatever the kubelet chooses ("" if it can)
    problem: str


def pending(
    pods: Iterable[PodView],
    node: str,
    resource: str,
    device_class: str | None,
    shared: bool,
    known: set[str],
    kubelet: Mapping[tuple[str, str], Sequence[str]] | None,
    taken: Collection[tuple[str, str]] = (),
) -> list[Pending]:
    """The pods an Allocate of ``resource`` may be for (rules 1 to 3 of the module doc).

    ``known``: this node's device ids (full ids). ``kubelet``: the kubelet's devices of the
    resource per pod (namespace, name), for every pod it knows; None without the
    pod-resources API. ``taken``: (pod uid, resource) the plugin handed out already.
    """
    out: list[Pending] = []
    mark = allocated_key(resource)
    for pod in pods:
        raw = pod.annotations.get(ASSIGNED_DEVICES)
        if raw is None or mark in pod.annotations or (pod.uid, resource) in taken:
            continue
        held: Sequence[str] = ()
        if kubelet is not None:
            if (pod.namespace, pod.name) not in kubelet:
                continue  # not a pod the kubelet admits: not this Allocate's
            held = kubelet[(pod.namespace, pod.name)]
            if len(held) >= pod.limits.get(resource, 0):
                continue  # the kubelet gave it all its devices of this resource already
        parsed = parse_assigned(raw)
        if parsed is None:
            out.append(Pending(pod, (), f"annotation {ASSIGNED_DEVICES} is not readable"))
            continue
        entries = _for_resource(parsed, resource, device_class, shared)
        if not entries:
            continue
        given = {_short(h) for h in held}
        left = [e for e in entries if _short(e.id) not in given]
        out.append(Pending(pod, tuple(left), _problem(pod, node, entries, known)))
    return out


def _problem(pod: PodView, node: str, entries: Sequence[AssignedDevice], known: set[str]) -> str:
    written_for = pod.annotations.get(ASSIGNED_FOR)
    if written_for is None:
        return f"the assignment has no {ASSIGNED_FOR} annotation"
    if written_for != f"{node}/{pod.uid}":
        return f"the assignment was written for {written_for}, not {node}/{pod.uid}"
    foreign = [e.id for e in entries if e.id not in known]
    if foreign:
        return f"{', '.join(foreign)} {'is' if len(foreign) == 1 else 'are'} not on node {node}"
    return ""


def _matches(candidate: Pending, ids: Sequence[str], shared: bool) -> bool:
    """Rule 4: the kubelet's ids are among the candidate's devices not handed out yet."""
    if candidate.problem:
        return False
    left = [_short(e.id) for e in candidate.entries]
    if shared:
        wanted = [_short(i) for i in dict.fromkeys(_short(i) for i in ids)]
        return all(w in left for w in wanted)
    return len(set(ids)) == len(ids) and set(ids) <= set(left)


@dataclass(frozen=True, slots=True)
class Decision:
    """What an Allocate hands out, and to whom."""

    #: the pod whose assignment is honoured; None when the kubelet's choice stands alone
    pod: PodView | None
    #: kubelet id -> share of its device (a slot's share; 1000 for a whole device)
    shares: dict[str, int] = field(default_factory=dict)
    #: the pod whose assignment was passed over, for the Event (None: none, or unknown)
    passed_over: PodView | None = None
    #: the Event's message; empty when nothing was passed over
    warning: str = ""


def slot_share(count: int, slots: int = SHARE_UNITS // DEFAULT_SLOT_SHARE) -> int:
    """The share of ``count`` of the ``slots`` slots of one device, nobody having assigned
    them: their even part of the device (``slots`` 4: 250 each), rounded down."""
    return min(SHARE_UNITS, count * SHARE_UNITS // max(slots, 1))


def _oldest(candidates: Sequence[Pending]) -> Pending:
    return min(candidates, key=lambda c: (c.pod.created, c.pod.namespace, c.pod.name))


def decide(
    candidates: Sequence[Pending],
    resource: str,
    ids: Sequence[str],
    shared: bool,
    slots: int = SHARE_UNITS // DEFAULT_SLOT_SHARE,
) -> Decision:
    """The decision for an Allocate of the kubelet ids ``ids`` (see the module doc);
    ``slots``: the shared resource's slots per device. Among several candidates that match
    (slots of one device, without the pod-resources API) the oldest pod is taken."""
    matched = [c for c in candidates if _matches(c, ids, shared)]
    if matched:
        chosen = _oldest(matched)
        if shared:
            by_device = {_short(e.id): e.share for e in chosen.entries}
            return Decision(chosen.pod, {i: by_device[_short(i)] for i in ids})
        # whole devices in the scheduler's order (the order the container lists them in)
        order = [_short(e.id) for e in chosen.entries if _short(e.id) in ids]
        return Decision(chosen.pod, dict.fromkeys(order, SHARE_UNITS))
    counts: dict[str, int] = {}
    for i in ids:
        counts[_short(i)] = counts.get(_short(i), 0) + 1
    shares = {i: slot_share(counts[_short(i)], slots) if shared else SHARE_UNITS for i in ids}
    if not candidates:
        return Decision(None, shares)  # no assignment waits: a pod hetsched did not place
    passed = candidates[0].pod if len(candidates) == 1 else None
    about = candidates[0] if len(candidates) == 1 else None
    chose = ", ".join(ids)
    if about is not None:
        why = about.problem or (
            f"the scheduler assigned {', '.join(e.id for e in about.entries) or 'nothing more'}"
        )
        warning = (
            f"{resource}: the kubelet chose {chose}; {why}. The container gets the kubelet's "
            "devices and the scheduler's assignment is not honoured."
        )
    else:
        names = ", ".join(f"{c.pod.namespace}/{c.pod.name}" for c in candidates)
        warning = (
            f"{resource}: the kubelet chose {chose}, which no assignment waiting on this node "
            f"({names}) names; the container gets the kubelet's devices."
        )
    return Decision(None, shares, passed, warning)


def preferred(candidates: Sequence[Pending], size: int) -> list[AssignedDevice] | None:
    """The devices to steer the kubelet to for a container of ``size`` ids: the first
    ``size`` still to hand out of the pod being admitted (the oldest that can be honoured,
    when the kubelet does not say)."""
    fit = [c for c in candidates if not c.problem and len(c.entries) >= 1]
    if not fit:
        return None
    chosen = _oldest(fit)
    return list(chosen.entries[:size])
