"""The DRA driver's checkpoint: the claims it prepared, so that it answers the same after
a restart.

The kubelet calls NodePrepareResources again for claims already prepared (after its own
restart, or when it retries), and NodeUnprepareResources for claims prepared before the
driver restarted. The driver records each prepared claim here **before** it answers the
kubelet, and forgets it only once unprepared, so both stay right across a crash: a claim in
the checkpoint is answered from it (its CDI spec rewritten if it went missing), without
asking the API server again.

The file is JSON, written whole (a temporary file fsynced and renamed into place, the
directory fsynced after). One that cannot be read is moved aside (``.corrupt``) and the
driver starts with no prepared claim: the kubelet's retries then prepare them again from
the API server.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Checkpoint", "PreparedClaim", "PreparedDevice"]

log = logging.getLogger("hetsched.k8s.dra")

VERSION = 1


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share: int
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    namespace: str
    name: str
    uid: str
    devices: tuple[PreparedDevice, ...]
    #: the claim's CDI spec, as written (rewritten from here when the file is gone)
    spec: dict[str, Any]


def _device(data: Any) -> PreparedDevice:
    return PreparedDevice(
        tuple(str(r) for r in data["requests"]),
        str(data["pool"]),
        str(data["device"]),
        tuple(str(c) for c in data["cdi_ids"]),
        int(data["share"]),
        str(data["share_id"]) if data.get("share_id") else None,
    )


def _claim(uid: str, data: Any) -> PreparedClaim:
    return PreparedClaim(
        str(data["namespace"]),
        str(data["name"]),
        uid,
        tuple(_device(d) for d in data["devices"]),
        dict(data["spec"]),
    )


class Checkpoint:
    """Prepared claims by uid, kept in ``path``. Not thread-safe: the driver serialises
    prepare and unprepare."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.claims: dict[str, PreparedClaim] = self._load()

    def _load(self) -> dict[str, PreparedClaim]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(text)
            if data.get("version") != VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
            return {uid: _claim(uid, c) for uid, c in data["claims"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            aside = self.path.with_name(self.path.name + ".corrupt")
            os.replace(self.path, aside)
            log.error("checkpoint %s cannot be read (%s); moved to %s", self.path, exc, aside)
            return {}

    def put(self, claim: PreparedClaim) -> None:
        self.claims[claim.uid] = claim
        self._save()

    def remove(self, uid: str) -> None:
        if self.claims.pop(uid, None) is not None:
            self._save()

    def _save(self) -> None:
        data = {
            "version": VERSION,
            "claims": {
                uid: {
                    "namespace": c.namespace,
                    "name": c.name,
                    "devices": [
                        {
                            "requests": list(d.requests),
                            "pool": d.pool,
                            "device": d.device,
                            "cdi_ids": list(d.cdi_ids),
                            "share": d.share,
                            "share_id": d.share_id,
                        }
                        for d in c.devices
                    ],
                    "spec": c.spec,
                }
                for uid, c in sorted(self.claims.items())
            },
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        staged = self.path.with_name(f".{self.path.name}.tmp")
        with open(staged, "w") as out:
            json.dump(data, out, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(staged, self.path)
        folder = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
