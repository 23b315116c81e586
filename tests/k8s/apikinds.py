"""The kinds the API server double serves, and what it checks of resource.k8s.io/v1 objects.

resource.k8s.io/v1 objects (ResourceSlice, DeviceClass, ResourceClaim,
ResourceClaimTemplate) are checked as the real API server does before storing them:

- **shape**: against the official Kubernetes 1.34 JSON schemas (generated from the OpenAPI
  spec, shipped by the ``kubernetes-validate`` package), in strict mode: an unknown field,
  a missing required field or a wrong type is refused with 422 Invalid;
- **rules** the schemas cannot say, from the API's validation code: a ResourceSlice names
  exactly one of ``nodeName``/``nodeSelector``/``allNodes``/``perDeviceNodeSelection``, has at
  most 128 devices with unique DNS-label names, at most 32 attributes and capacities per
  device, attribute names ``[domain/]C-identifier`` (at most 32 characters after the
  domain), exactly one value per attribute, string values of at most 64 characters, a pool
  generation >= 0 and a slice count >= 1, and an unchanged driver, pool name and node name;
  a ResourceClaim has 1..32 uniquely named requests, each with exactly one of ``exactly``
  and ``firstAvailable`` (1..8 sub-requests), ``count`` > 0 with ``ExactCount``, and an
  immutable spec; its status has at most 256 ``reservedFor`` entries with unique uids,
  none without an allocation and no new one once the claim is being deleted, at most 32
  allocation results naming requests of the claim, and an allocation that cannot be
  changed once set (only removed).

Defaults as the real server applies them: a request's ``exactly.allocationMode`` is
``ExactCount`` and its ``count`` 1.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

#: the Kubernetes version whose schemas the double checks against
SCHEMA_VERSION = "1.34.0"


@dataclass(frozen=True, slots=True)
class Kind:
    plural: str
    kind: str
    group_version: str
    namespaced: bool
    #: a ``/status`` subresource: a main update keeps the status, a status update only
    #: changes the status
    status_subresource: bool = False
    #: checked against the schemas and rules above
    checked: bool = False

    @property
    def prefix(self) -> str:
        return "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"


_RESOURCE = "resource.k8s.io/v1"

KINDS: dict[str, Kind] = {
    k.plural: k
    for k in (
        Kind("pods", "Pod", "v1", True),
        Kind("nodes", "Node", "v1", False),
        Kind("events", "Event", "v1", True),
        Kind("leases", "Lease", "coordination.k8s.io/v1", True),
        Kind("resourceslices", "ResourceSlice", _RESOURCE, False, checked=True),
        Kind("deviceclasses", "DeviceClass", _RESOURCE, False, checked=True),
        Kind("resourceclaims", "ResourceClaim", _RESOURCE, True, True, checked=True),
        Kind("resourceclaimtemplates", "ResourceClaimTemplate", _RESOURCE, True, checked=True),
    )
}

#: URL prefix -> the group version served under it
PREFIXES: dict[str, str] = {k.prefix: k.group_version for k in KINDS.values()}


def namespaced(resource: str) -> bool:
    kind = KINDS.get(resource)
    return kind.namespaced if kind is not None else True


# -- defaults --------------------------------------------------------------------------------


def apply_defaults(resource: str, obj: Obj) -> None:
    spec: Any = None
    if resource == "resourceclaims":
        spec = obj.get("spec")
    elif resource == "resourceclaimtemplates":
        spec = (obj.get("spec") or {}).get("spec")
    if not isinstance(spec, dict):
        return
    for request in (spec.get("devices") or {}).get("requests") or []:
        exactly = request.get("exactly") if isinstance(request, dict) else None
        if isinstance(exactly, dict):
            exactly.setdefault("allocationMode", "ExactCount")
            if exactly["allocationMode"] == "ExactCount":
                exactly.setdefault("count", 1)
        for sub in (request.get("firstAvailable") or []) if isinstance(request, dict) else []:
            if isinstance(sub, dict):
                sub.setdefault("allocationMode", "ExactCount")
                if sub["allocationMode"] == "ExactCount":
                    sub.setdefault("count", 1)


# -- checks ----------------------------------------------------------------------------------

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _label(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(_DNS_LABEL.match(value))


def _subdomain(value: Any, limit: int = 253) -> bool:
    return isinstance(value, str) and len(value) <= limit and bool(_DNS_SUBDOMAIN.match(value))


def _qualified_name(name: str) -> str | None:
    """Why ``name`` is not a QualifiedName (``[domain/]identifier``), or None."""
    domain, slash, ident = name.rpartition("/")
    if slash and not _subdomain(domain, 63):
        return f"{name!r}: the domain must be a DNS subdomain of at most 63 characters"
    if not _C_IDENTIFIER.match(ident) or len(ident) > 32:
        return f"{name!r}: the name must be a C identifier of at most 32 characters"
    return None


@functools.cache
def _validator(kind: str, api_version: str) -> Any:
    """The strict JSON schema validator of one kind, loaded once (loading the shared
    definitions takes a while, so the package's own ``validate`` is too slow per request)."""
    import jsonschema
    from kubernetes_validate.utils import schema_contents
    from referencing import Registry, Resource

    folder = f"kubernetes-json-schema/v{SCHEMA_VERSION}-local-strict"
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = schema_contents(f"{folder}/{kind.lower()}-{group}.json", SCHEMA_VERSION)
    definitions = schema_contents(f"{folder}/_definitions.json", SCHEMA_VERSION)
    registry: Any = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(definitions) @ registry
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def schema_errors(obj: Obj) -> list[str]:
    """What the official JSON schema (strict) says is wrong with ``obj``."""
    validator = _validator(str(obj.get("kind")), str(obj.get("apiVersion")))
    errors = []
    for error in validator.iter_errors(obj):
        where = ".".join(str(p) for p in error.path)
        errors.append(f"{where}: {error.message}" if where else error.message)
    return errors[:10]


def _slice_errors(obj: Obj, old: Obj | None) -> list[str]:
    spec = obj.get("spec") or {}
    errors: list[str] = []
    if not _subdomain(spec.get("driver"), 63):
        errors.append("spec.driver: must be a DNS subdomain of at most 63 characters")
    pool = spec.get("pool") or {}
    name = str(pool.get("name") or "")
    if not name or len(name) > 253 or not all(_subdomain(p) for p in name.split("/")):
        errors.append("spec.pool.name: must be DNS subdomains separated by '/'")
    if int(pool.get("resourceSliceCount") or 0) <= 0:
        errors.append("spec.pool.resourceSliceCount: must be greater than zero")
    if int(pool.get("generation") or 0) < 0:
        errors.append("spec.pool.generation: must be greater than or equal to zero")
    chosen = [
        f
        for f in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
        if spec.get(f) not in (None, False, "")
    ]
    if len(chosen) != 1:
        errors.append(
            "spec: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
            f"`perDeviceNodeSelection` is required, got {chosen}"
        )
    devices = spec.get("devices") or []
    if len(devices) > 128:
        errors.append(f"spec.devices: must have at most 128 items, got {len(devices)}")
    names = [d.get("name") for d in devices]
    if len(set(names)) != len(names):
        errors.append("spec.devices: device names must be unique")
    for i, device in enumerate(devices):
        errors += _device_errors(device, f"spec.devices[{i}]")
    if old is not None:
        before = old.get("spec") or {}
        for path in ("driver", "nodeName"):
            if spec.get(path) != before.get(path):
                errors.append(f"spec.{path}: field is immutable")
        if pool.get("name") != (before.get("pool") or {}).get("name"):
            errors.append("spec.pool.name: field is immutable")
    return errors


def _device_errors(device: Obj, where: str) -> list[str]:
    errors: list[str] = []
    if not _label(device.get("name")):
        errors.append(f"{where}.name: must be a DNS label")
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    if len(attributes) + len(capacity) > 32:
        errors.append(f"{where}: the total number of attributes and capacities must not exceed 32")
    for name, value in attributes.items():
        why = _qualified_name(name)
        if why:
            errors.append(f"{where}.attributes: {why}")
        set_fields = [k for k in ("bool", "int", "string", "version") if k in value]
        if len(set_fields) != 1:
            errors.append(f"{where}.attributes[{name}]: exactly one value must be specified")
        text = value.get("string", value.get("version"))
        if isinstance(text, str) and len(text) > 64:
            errors.append(f"{where}.attributes[{name}]: must be at most 64 characters")
    for name in capacity:
        why = _qualified_name(name)
        if why:
            errors.append(f"{where}.capacity: {why}")
    if not device.get("allowMultipleAllocations"):
        for name, value in capacity.items():
            if "requestPolicy" in value:
                errors.append(
                    f"{where}.capacity[{name}].requestPolicy: allowMultipleAllocations must be true"
                )
    return errors


def _request_names(spec: Obj) -> set[str]:
    names: set[str] = set()
    for request in (spec.get("devices") or {}).get("requests") or []:
        names.add(request.get("name", ""))
        for sub in request.get("firstAvailable") or []:
            names.add(f"{request.get('name', '')}/{sub.get('name', '')}")
    return names


def _claim_spec_errors(spec: Obj, where: str) -> list[str]:
    errors: list[str] = []
    requests = (spec.get("devices") or {}).get("requests") or []
    if len(requests) > 32:
        errors.append(f"{where}.devices.requests: must have at most 32 items")
    names = [r.get("name") for r in requests]
    if len(set(names)) != len(names):
        errors.append(f"{where}.devices.requests: request names must be unique")
    for i, request in enumerate(requests):
        at = f"{where}.devices.requests[{i}]"
        if not _label(request.get("name")):
            errors.append(f"{at}.name: must be a DNS label")
        exactly, first = request.get("exactly"), request.get("firstAvailable")
        if (exactly is None) == (not first):
            errors.append(f"{at}: exactly one of `exactly` or `firstAvailable` is required")
        if first is not None and not 1 <= len(first) <= 8:
            errors.append(f"{at}.firstAvailable: must have 1 to 8 items")
        for j, part in enumerate([exactly] if exactly else list(first or [])):
            sub = f"{at}.exactly" if exactly else f"{at}.firstAvailable[{j}]"
            if not _subdomain(part.get("deviceClassName")):
                errors.append(f"{sub}.deviceClassName: must be a DNS subdomain")
            mode = part.get("allocationMode", "ExactCount")
            if mode == "ExactCount" and int(part.get("count", 1)) <= 0:
                errors.append(f"{sub}.count: must be greater than zero")
            if mode == "All" and part.get("count"):
                errors.append(f"{sub}.count: must not be specified when allocationMode is 'All'")
            if len(part.get("selectors") or []) > 32:
                errors.append(f"{sub}.selectors: must have at most 32 items")
    return errors


def _claim_status_errors(obj: Obj, old: Obj) -> list[str]:
    status = obj.get("status") or {}
    before = old.get("status") or {}
    errors: list[str] = []
    reserved = status.get("reservedFor") or []
    if len(reserved) > 256:
        errors.append("status.reservedFor: must have at most 256 items")
    uids = [r.get("uid") for r in reserved]
    if len(set(uids)) != len(uids):
        errors.append("status.reservedFor: duplicate uid")
    for i, ref in enumerate(reserved):
        for key in ("resource", "name", "uid"):
            if not ref.get(key):
                errors.append(f"status.reservedFor[{i}].{key}: Required value")
    allocation = status.get("allocation")
    if reserved and allocation is None:
        errors.append("status.reservedFor: may not be specified when `allocated` is not set")
    if old["metadata"].get("deletionTimestamp"):
        known = {r.get("uid") for r in before.get("reservedFor") or []}
        if any(r.get("uid") not in known for r in reserved):
            errors.append(
                "status.reservedFor: new entries may not be added while `deletionTimestamp` is set"
            )
    if before.get("allocation") is not None and allocation is not None:
        if allocation != before["allocation"]:
            errors.append("status.allocation: field is immutable")
    elif allocation is not None:
        results = (allocation.get("devices") or {}).get("results") or []
        if len(results) > 32:
            errors.append("status.allocation.devices.results: must have at most 32 items")
        names = _request_names(obj.get("spec") or {})
        for i, result in enumerate(results):
            at = f"status.allocation.devices.results[{i}]"
            if result.get("request") not in names:
                errors.append(f"{at}.request: must be the name of a request in the claim")
            if not _label(result.get("device")):
                errors.append(f"{at}.device: must be a DNS label")
            if not _subdomain(result.get("driver"), 63):
                errors.append(f"{at}.driver: must be a DNS subdomain")
    return errors


def check(resource: str, obj: Obj, old: Obj | None, subresource: str | None) -> list[str]:
    """Why the API server would refuse to store ``obj`` (empty: it is valid)."""
    kind = KINDS.get(resource)
    if kind is None or not kind.checked:
        return []
    errors = schema_errors(obj)
    if errors:
        return errors
    if resource == "resourceslices":
        return _slice_errors(obj, old)
    if resource == "resourceclaims":
        if subresource == "status":
            return _claim_status_errors(obj, old or obj)
        errors = _claim_spec_errors(obj.get("spec") or {}, "spec")
        if old is not None and obj.get("spec") != old.get("spec"):
            errors.append("spec: field is immutable")
        return errors
    if resource == "resourceclaimtemplates":
        errors = _claim_spec_errors((obj.get("spec") or {}).get("spec") or {}, "spec.spec")
        if old is not None and obj.get("spec") != old.get("spec"):
            errors.append("spec: field is immutable")
        return errors
    return []


def status_view(resource: str, new: Obj, old: Obj, subresource: str | None) -> Obj:
    """What an update stores for a kind with a status subresource: a main update keeps
    the old status; a status update keeps the old spec and the old labels, annotations,
    finalizers, owner references, generation and deletion timestamp."""
    kind = KINDS.get(resource)
    if kind is None or not kind.status_subresource:
        return new
    if subresource == "status":
        out = dict(old)
        out["status"] = new.get("status") or {}
        meta = dict(old["metadata"])
        meta["resourceVersion"] = new.get("metadata", {}).get(
            "resourceVersion", meta.get("resourceVersion")
        )
        out["metadata"] = meta
        return out
    out = dict(new)
    if "status" in old:
        out["status"] = old["status"]
    else:
        out.pop("status", None)
    return out
