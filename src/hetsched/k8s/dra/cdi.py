"""CDI (Container Device Interface) specs for prepared claims.

The kubelet passes the CDI device ids a driver returns to the container runtime, which
reads the matching specs from its CDI directory (``/var/run/cdi``) and applies their edits
to the container. hetsched writes one spec file per prepared claim,
``k8s.hetsched.io-claim_<claim uid>.json``, of kind :data:`CDI_KIND`:

- one CDI device per allocated device, named ``<claim uid>-<device>`` (a device's name,
  never a request's: a firstAvailable sub-request ``gpus/two-a100`` has a slash, which a CDI
  name may not hold), whose edits add the device's nodes (``/dev/nvidia3``,
  ``/dev/dri/renderD128``, ...) and the environment the device plugin gives a container
  (``HETSCHED_DEVICES``, ``CUDA_VISIBLE_DEVICES``, ..., and for one shared device its
  share). The CDI specification requires every device to carry at least one edit, and a
  runtime refuses the whole spec otherwise: a device without nodes (an FPGA or an NPU seen
  through its environment only, a fake device) still carries the environment. The
  environment is the claim's, the same on each of its devices, so that injecting any of
  them, or all, gives the same values;
- edits for the whole claim (applied when any of its devices is injected), when there are
  any: the vendors' control nodes (``/dev/nvidiactl``) and the configured mounts.

Files are written whole (a temporary file renamed into place), so the runtime never reads
half a spec.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hetsched.k8s.deviceplugin.allocation import (
    Assignment,
    MountSpec,
    Roots,
    control_nodes,
    device_nodes,
    visible_env,
)

__all__ = [
    "CDI_KIND",
    "CDI_VERSION",
    "cdi_id",
    "claim_spec",
    "remove_spec",
    "spec_path",
    "write_spec",
]

CDI_VERSION = "0.6.0"
#: vendor/class of hetsched's CDI devices
CDI_KIND = "k8s.hetsched.io/device"

Obj = dict[str, Any]


def _device_name(claim_uid: str, device: str) -> str:
    return f"{claim_uid}-{device}"


def cdi_id(claim_uid: str, device: str) -> str:
    """The fully qualified CDI id of one device of a claim."""
    return f"{CDI_KIND}={_device_name(claim_uid, device)}"


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    return cdi_dir / f"k8s.hetsched.io-claim_{claim_uid}.json"


def claim_spec(
    claim_uid: str,
    devices: Sequence[tuple[str, Assignment]],
    roots: Roots,
    mounts: Sequence[MountSpec] = (),
) -> Obj:
    """The CDI spec of one claim: ``devices`` as (DRA device name, assignment)."""
    assignments = [a for _, a in devices]
    env = [f"{k}={v}" for k, v in sorted(visible_env(assignments).items())]
    edits: Obj = {}
    controls = control_nodes((a.device.vendor for a in assignments), roots)
    if controls:
        edits["deviceNodes"] = [{"path": p} for p in controls]
    if mounts:
        edits["mounts"] = [
            {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                "options": ["ro", "nosuid", "nodev", "bind"] if m.read_only else ["bind"],
            }
            for m in mounts
        ]
    spec: Obj = {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": [
            {"name": _device_name(claim_uid, name), "containerEdits": _device_edits(a, env, roots)}
            for name, a in devices
        ],
    }
    if edits:
        spec["containerEdits"] = edits
    return spec


def _device_edits(assignment: Assignment, env: list[str], roots: Roots) -> Obj:
    """One device's edits: the claim's environment (never empty: ``HETSCHED_DEVICES`` is
    always there), then its device nodes when it has any."""
    edits: Obj = {"env": list(env)}
    nodes = device_nodes(assignment.device, roots)
    if nodes:
        edits["deviceNodes"] = [{"path": p} for p in nodes]
    return edits


def write_spec(path: Path, spec: Obj) -> None:
    """Write ``spec`` at ``path`` at once (a temporary file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_name(f".{path.name}.tmp")
    with open(staged, "w") as out:
        json.dump(spec, out, indent=2, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.chmod(staged, 0o644)
    os.replace(staged, path)


def remove_spec(path: Path) -> None:
    path.unlink(missing_ok=True)
