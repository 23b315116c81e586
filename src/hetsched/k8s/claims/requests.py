"""ResourceClaims as the core's device requests, and the core's choice as an allocation.

A claim's request (``spec.devices.requests[]``) becomes one device request of the pod's
task, so the core decides it with everything else the pod asks for (fit, score, quota,
gang, preemption):

- the candidates are the devices that pass every CEL selector of the request's DeviceClass
  and of the request itself, as in DRA: one selector of the core, their conjunction, which
  the core evaluates on the attributes the DRA devices carry
  (:mod:`hetsched.k8s.claims.inventory`);
- ``exactly`` with ``allocationMode: ExactCount`` asks for ``count`` devices; with ``All``,
  for all the matching devices of a node: the core is asked for as many as the node with
  the most of them has, so the pod goes where it gets them all;
- ``firstAvailable`` sub-requests are the request's alternatives, first that fits wins;
- a request of one device whose DeviceClass or claim config gives hetsched's driver a
  ``share`` (``{driver: hetsched.io, parameters: {share: 300}}``, the claim's over the
  class's) asks for that share of a device, so claims share a GPU as pods do on the device
  plugin path;
- the core's classes of the request are those of the published devices that match it (its
  GPUs are the core's ``gpu``); a request nothing published matches waits (ClaimError).

Refused with a :class:`ClaimError` naming the field: an unknown DeviceClass, ``constraints``
(``matchAttribute``, ``distinctAttribute``), ``adminAccess``, capacity requests, a selector
that does not compile, a share below the whole device for several devices.

:func:`allocations` turns the devices the core chose for a claim back into the claim's
``status.allocation``: results naming driver, pool, device and the request (``gpu`` or
``gpus/h100`` for a sub-request), the configs (the classes' as ``FromClass``, the claim's as
``FromClaim``) and a node selector naming the node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hetsched.cluster.placement import DeviceShare
from hetsched.k8s.claims.inventory import DraDevice
from hetsched.model.device import SHARE_UNITS, Device
from hetsched.model.job import DeviceChoice, DeviceRequest
from hetsched.model.selector import DRIVER, SelectorError, attr_key, compile_selector, matches

__all__ = [
    "ClaimError",
    "ClaimPlan",
    "RequestPlan",
    "allocated_node",
    "allocations",
    "plan_claim",
]

Obj = Mapping[str, Any]

#: the driver whose opaque config carries a share
HETSCHED_DRIVER = "hetsched.io"
#: true on DRA devices alone (:data:`~hetsched.model.selector.DRIVER` is theirs)
_DRA_ONLY = f'"{DRIVER}" in device.attributes'
#: the same guard the other way round, for the device plugin's requests
PLUGIN_ONLY = f'!("{DRIVER}" in device.attributes)'


class ClaimError(ValueError):
    """A claim the hetsched scheduler cannot allocate (yet); the message says why."""


@dataclass(frozen=True, slots=True)
class RequestPlan:
    """One request of a claim as the core's device request; ``results[i]`` is the request
    name an allocation result of choice ``i`` names, ``classes[i]`` its DeviceClass."""

    request: DeviceRequest
    results: tuple[str, ...]
    classes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    namespace: str
    name: str
    uid: str
    requests: tuple[RequestPlan, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def devices(self) -> tuple[DeviceRequest, ...]:
        return tuple(r.request for r in self.requests)


def _selectors(spec: Any, where: str) -> list[str]:
    out = []
    for i, entry in enumerate(spec.get("selectors") or [] if isinstance(spec, Mapping) else []):
        cel = entry.get("cel") if isinstance(entry, Mapping) else None
        expression = cel.get("expression") if isinstance(cel, Mapping) else None
        if not isinstance(expression, str) or not expression.strip():
            raise ClaimError(f"{where}.selectors[{i}]: only CEL selectors are supported")
        out.append(expression)
    return out


def _share(configs: Iterable[Any], request: str) -> int | None:
    """The share hetsched's driver config gives ``request`` (later entries win)."""
    found = None
    parent = request.split("/", 1)[0]
    for entry in configs:
        if not isinstance(entry, Mapping):
            continue
        named = entry.get("requests") or []
        if named and request not in named and parent not in named:
            continue
        opaque = entry.get("opaque")
        if not isinstance(opaque, Mapping) or opaque.get("driver") != HETSCHED_DRIVER:
            continue
        parameters = opaque.get("parameters")
        value = parameters.get("share") if isinstance(parameters, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= SHARE_UNITS:
            found = value
    return found


@dataclass(frozen=True, slots=True)
class _Context:
    claim: str
    classes: Mapping[str, Obj]
    by_node: Mapping[str, Sequence[Device]]
    kinds: tuple[Device, ...]
    claim_config: tuple[Any, ...]


def _choice(ctx: _Context, part: Obj, result: str, where: str) -> list[DeviceChoice]:
    class_name = str(part.get("deviceClassName") or "")
    device_class = ctx.classes.get(class_name)
    if device_class is None:
        raise ClaimError(f"{where}.deviceClassName: DeviceClass {class_name!r} does not exist")
    for field in ("adminAccess", "capacity"):
        if part.get(field):
            raise ClaimError(f"{where}.{field}: not supported by the hetsched scheduler")
    spec = device_class.get("spec") or {}
    selectors = _selectors(spec, f"DeviceClass {class_name}") + _selectors(part, where)
    # only DRA devices: a device plugin's device of the same class is never a candidate
    expression = " && ".join([_DRA_ONLY, *(f"({s})" for s in selectors)])
    try:
        compile_selector(expression)
    except SelectorError as exc:
        raise ClaimError(f"{where}: {exc}") from None
    matching = [d for d in ctx.kinds if matches(expression, attr_key(d.selector_view()))]
    if not matching:
        return []  # an alternative nothing published matches: never the one taken
    if part.get("allocationMode") == "All":
        per_node = [
            sum(1 for d in devices if matches(expression, attr_key(d.selector_view())))
            for devices in ctx.by_node.values()
        ]
        count = max(per_node)
    else:
        count = int(part.get("count") or 1)
    configs = [*(spec.get("config") or []), *ctx.claim_config]
    share = _share(configs, result) or SHARE_UNITS
    if share < SHARE_UNITS and count != 1:
        raise ClaimError(f"{where}: a share below {SHARE_UNITS} needs a count of 1, got {count}")
    classes = sorted({d.device_class for d in matching})
    return [DeviceChoice(c, count, share, expression) for c in classes]


def plan_claim(
    claim: Obj, classes: Mapping[str, Obj], by_node: Mapping[str, Sequence[Device]]
) -> ClaimPlan:
    """The core's device requests of an unallocated claim (see the module docstring)."""
    meta = claim.get("metadata") or {}
    key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
    devices = (claim.get("spec") or {}).get("devices") or {}
    if devices.get("constraints"):
        raise ClaimError(
            f"claim {key}: spec.devices.constraints (matchAttribute, distinctAttribute) are "
            "not supported by the hetsched scheduler; let kube-scheduler allocate this claim"
        )
    kinds = {attr_key(d.selector_view()): d for ds in by_node.values() for d in ds}
    ctx = _Context(key, classes, by_node, tuple(kinds.values()), tuple(devices.get("config") or []))
    plans = []
    for i, request in enumerate(devices.get("requests") or []):
        name = str(request.get("name") or "")
        where = f"claim {key}: spec.devices.requests[{i}]"
        if request.get("exactly"):
            parts = [(name, request["exactly"], f"{where}.exactly")]
        else:
            parts = [
                (f"{name}/{sub.get('name')}", sub, f"{where}.firstAvailable[{j}]")
                for j, sub in enumerate(request.get("firstAvailable") or [])
            ]
        choices: list[DeviceChoice] = []
        results: list[str] = []
        names: list[str] = []
        for result, part, at in parts:
            for choice in _choice(ctx, part, result, at):
                choices.append(choice)
                results.append(result)
                names.append(str(part.get("deviceClassName")))
        if not choices:
            raise ClaimError(f"{where}: no published device matches it (yet)")
        plans.append(RequestPlan(DeviceRequest(tuple(choices)), tuple(results), tuple(names)))
    if not plans:
        raise ClaimError(f"claim {key}: spec.devices.requests is empty")
    return ClaimPlan(
        str(meta.get("namespace") or "default"),
        str(meta.get("name")),
        str(meta.get("uid") or ""),
        tuple(plans),
    )


def _fits(choice: DeviceChoice, device: Device | None, share: DeviceShare) -> bool:
    if device is None or device.device_class != choice.device_class:
        return False
    if share.share != choice.share:
        return False
    return choice.selector is None or matches(choice.selector, attr_key(device.selector_view()))


def _parse(
    plans: Sequence[RequestPlan],
    shares: Sequence[DeviceShare],
    devices: Mapping[str, Device],
    at: int = 0,
    pos: int = 0,
) -> list[tuple[int, str, str, DeviceShare]] | None:
    """(request index, result request, DeviceClass, device) for every device, reading the
    devices as the requests' choices in order (the core takes each request's first
    alternative that fits and lists its devices in request order); None when they cannot be
    read so."""
    if at == len(plans):
        return [] if pos == len(shares) else None
    plan = plans[at]
    for i, choice in enumerate(plan.request.choices):
        taken = shares[pos : pos + choice.count]
        if len(taken) < choice.count:
            continue
        if not all(_fits(choice, devices.get(s.device_id), s) for s in taken):
            continue
        rest = _parse(plans, shares, devices, at + 1, pos + choice.count)
        if rest is not None:
            return [(at, plan.results[i], plan.classes[i], s) for s in taken] + rest
    return None


def _configs(
    claim: Obj, chosen: Iterable[tuple[str, str]], classes: Mapping[str, Obj]
) -> list[dict[str, Any]]:
    """The allocation's configs: each DeviceClass's for the requests it served, then the
    claim's own."""
    out: list[dict[str, Any]] = []
    for request, class_name in dict.fromkeys(chosen):
        for entry in (classes.get(class_name) or {}).get("spec", {}).get("config") or []:
            if isinstance(entry, Mapping) and entry.get("opaque"):
                out.append(
                    {"source": "FromClass", "requests": [request], "opaque": entry["opaque"]}
                )
    for entry in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []:
        if isinstance(entry, Mapping) and entry.get("opaque"):
            config: dict[str, Any] = {"source": "FromClaim", "opaque": entry["opaque"]}
            if entry.get("requests"):
                config["requests"] = list(entry["requests"])
            out.append(config)
    return out


def allocations(
    claims: Sequence[tuple[Obj, ClaimPlan]],
    shares: Sequence[DeviceShare],
    devices: Mapping[str, Device],
    origin: Mapping[str, DraDevice],
    classes: Mapping[str, Obj],
    node: str,
) -> list[dict[str, Any]]:
    """Each claim's ``status.allocation`` for the devices the core chose for the claims on
    ``node`` (``shares``: their part of the task's placement, in request order)."""
    plans = [request for _, plan in claims for request in plan.requests]
    owner = [index for index, (_, plan) in enumerate(claims) for _ in plan.requests]
    parsed = _parse(plans, shares, devices)
    if parsed is None:
        names = ", ".join(plan.key for _, plan in claims)
        raise ClaimError(f"claims {names}: the chosen devices do not match their requests")
    out = []
    for index, (claim, _) in enumerate(claims):
        mine = [(r, c, s) for at, r, c, s in parsed if owner[at] == index]
        results = []
        for request, _, share in mine:
            where = origin[share.device_id]
            results.append(
                {
                    "request": request,
                    "driver": where.driver,
                    "pool": where.pool,
                    "device": where.name,
                }
            )
        found: dict[str, Any] = {"results": results}
        configs = _configs(claim, [(r, c) for r, c, _ in mine], classes)
        if configs:
            found["config"] = configs
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        out.append({"devices": found, "nodeSelector": {"nodeSelectorTerms": [term]}})
    return out


def allocated_node(allocation: Obj) -> str | None:
    """The one node an allocation's node selector names (``metadata.name In [node]``), or
    None (devices reachable from several nodes)."""
    terms = ((allocation.get("nodeSelector") or {}).get("nodeSelectorTerms")) or []
    if len(terms) != 1:
        return None
    for expression in terms[0].get("matchFields") or []:
        values = expression.get("values") or []
        named = expression.get("key") == "metadata.name" and expression.get("operator") == "In"
        if named and len(values) == 1:
            return str(values[0])
    return None
