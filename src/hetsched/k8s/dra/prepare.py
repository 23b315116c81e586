"""NodePrepareResources and NodeUnprepareResources, whatever the gRPC version.

The kubelet names claims (namespace, name, uid), not devices. To prepare one, the driver
reads the claim from the API server and checks it before touching anything:

- it is the claim the kubelet means (same uid: not a claim recreated under the same name);
- it is allocated (``status.allocation``);
- every device of this driver in it is in this node's pool and is a device of this node, by
  name, and healthy: a device of another node is never prepared here.

Then it writes the claim's CDI spec (none when the claim has no device of this driver),
records the claim in the checkpoint, and answers with the CDI ids. Each device is answered
under the requests of the claim it serves: a result of a ``firstAvailable`` sub-request
(``gpus/two-a100``) under its parent request (``gpus``), the name a container's
``resources.claims[].request`` gives and the kubelet looks devices up by. Preparing a claim
already in the checkpoint answers the same again (its spec rewritten if it went missing)
without asking the API server; unpreparing removes the spec and forgets the claim, and
unpreparing a claim it does not know is a success. A failure is that claim's ``error``; the
others are prepared all the same. One lock serialises all of it, as the kubelet may call
from several goroutines.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from hetsched.k8s.deviceplugin.allocation import Assignment, MountSpec, Roots
from hetsched.k8s.dra.book import DeviceBook
from hetsched.k8s.dra.cdi import cdi_id, claim_spec, remove_spec, spec_path, write_spec
from hetsched.k8s.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from hetsched.k8s.dra.devices import allocated_devices
from hetsched.model.device import Health

__all__ = ["ClaimReader", "ClaimRef", "Outcome", "Preparer", "parent_requests"]

log = logging.getLogger("hetsched.k8s.dra")


class ClaimReader(Protocol):
    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim as the API server has it; None when there is none."""
        ...


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str


@dataclass(frozen=True, slots=True)
class Outcome:
    devices: tuple[PreparedDevice, ...] = ()
    #: non-empty: the claim was not prepared (or not unprepared), and why
    error: str = ""


class _Refused(Exception):
    pass


@dataclass
class Preparer:
    driver: str
    node: str
    api: ClaimReader
    book: DeviceBook
    checkpoint: Checkpoint
    cdi_dir: Path
    roots: Roots
    mounts: tuple[MountSpec, ...] = ()

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, Outcome]:
        out: dict[str, Outcome] = {}
        with self._lock:
            for claim in claims:
                try:
                    out[claim.uid] = Outcome(self._prepare(claim))
                except _Refused as exc:
                    out[claim.uid] = Outcome(error=str(exc))
                except Exception as exc:  # an API or a file error: this claim fails alone
                    log.exception("preparing claim %s/%s", claim.namespace, claim.name)
                    out[claim.uid] = Outcome(error=f"preparing failed: {exc}")
                if out[claim.uid].error:
                    log.warning(
                        "claim %s/%s not prepared: %s",
                        claim.namespace,
                        claim.name,
                        out[claim.uid].error,
                    )
        return out

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, Outcome]:
        out: dict[str, Outcome] = {}
        with self._lock:
            for claim in claims:
                try:
                    remove_spec(spec_path(self.cdi_dir, claim.uid))
                    self.checkpoint.remove(claim.uid)
                    out[claim.uid] = Outcome()
                except OSError as exc:
                    out[claim.uid] = Outcome(error=f"unpreparing failed: {exc}")
                log.info("claim %s/%s unprepared", claim.namespace, claim.name)
        return out

    def _prepare(self, ref: ClaimRef) -> tuple[PreparedDevice, ...]:
        done = self.checkpoint.claims.get(ref.uid)
        if done is not None:
            path = spec_path(self.cdi_dir, ref.uid)
            if done.spec.get("devices") and not path.exists():
                write_spec(path, done.spec)
            # a checkpoint of an earlier version may hold sub-request names
            return tuple(replace(d, requests=parent_requests(d.requests)) for d in done.devices)
        claim = self.api.get_resource_claim(ref.namespace, ref.name)
        where = f"claim {ref.namespace}/{ref.name}"
        if claim is None:
            raise _Refused(f"{where} does not exist")
        uid = str((claim.get("metadata") or {}).get("uid") or "")
        if uid != ref.uid:
            raise _Refused(f"{where} is uid {uid}, not {ref.uid}: it was recreated")
        if not (claim.get("status") or {}).get("allocation"):
            raise _Refused(f"{where} is not allocated")
        allocated = allocated_devices(claim, self.driver)
        _, devices, health = self.book.snapshot()
        chosen: list[tuple[str, Assignment]] = []
        for entry in allocated:
            if entry.pool != self.node or entry.device not in devices:
                raise _Refused(
                    f"{where}: device {entry.device} of pool {entry.pool} is not a device of "
                    f"node {self.node}"
                )
            device = devices[entry.device]
            if device.health is not Health.HEALTHY:
                why = health.get(entry.device)
                raise _Refused(
                    f"{where}: device {entry.device} is unhealthy"
                    + (f" ({why.message})" if why is not None and why.message else "")
                )
            if all(name != entry.device for name, _ in chosen):
                chosen.append((entry.device, Assignment(device, entry.share)))
        spec = claim_spec(ref.uid, chosen, self.roots, self.mounts)
        prepared = tuple(
            PreparedDevice(
                parent_requests(entry.requests),
                entry.pool,
                entry.device,
                (cdi_id(ref.uid, entry.device),),
                entry.share,
                entry.share_id,
            )
            for entry in allocated
        )
        if chosen:
            write_spec(spec_path(self.cdi_dir, ref.uid), spec)
        self.checkpoint.put(PreparedClaim(ref.namespace, ref.name, ref.uid, prepared, spec))
        log.info(
            "claim %s/%s prepared: %s",
            ref.namespace,
            ref.name,
            ", ".join(f"{d.device}@{d.share}" for d in prepared) or "no device of this driver",
        )
        return prepared


def parent_requests(requests: Sequence[str]) -> tuple[str, ...]:
    """The claim's requests that ``requests`` (results' request names) serve: a
    sub-request ``gpus/two-a100`` is its parent ``gpus``; each name once, in order."""
    return tuple(dict.fromkeys(r.split("/", 1)[0] for r in requests if r))


def refs(claims: Sequence[Any]) -> list[ClaimRef]:
    """The claims of a request message (any version)."""
    return [ClaimRef(c.namespace, c.uid, c.name) for c in claims]


def describe(outcomes: Mapping[str, Outcome]) -> str:
    return ", ".join(f"{uid}: {o.error or 'ok'}" for uid, o in outcomes.items())
