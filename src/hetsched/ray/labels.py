"""The Ray node labels, node environment and accelerator names hetsched reads (one place).

A Ray node is started with labels (``ray start --labels k=v,...``); hetsched reads them from
the Ray cluster's node table:

- ``hetsched.io/node``: the hetsched node name (default: the node's hostname);
- ``hetsched.io/schedulable``: ``"false"`` keeps hetsched from placing work on the node (the
  head of a cluster made by ``hetsched ray local``);
- ``hetsched.io/discovery``: which discovery backends the node's probe runs, joined with
  dots (``cpu.nvidia.pci``, the default; ``fake``), or ``ray``: devices from Ray's own
  resources (``GPU`` and ``accelerator_type:*``, logical GPUs), no probe;
- ``hetsched.io/gpu-model``: the model of a node's GPUs, for ``ray`` discovery when Ray has
  no ``accelerator_type:*`` resource;
- ``hetsched.io/address``: where the node's tasks are reached (``HETSCHED_HOST`` and
  ``HETSCHED_PEERS`` of jobs with groups); default: the node's IP address in Ray's table.

The ``fake`` backend reads its device file from ``HETSCHED_FAKE_DEVICES`` in the node's
environment (the raylet's, which Ray's workers inherit). The same variable names a backend
list as ``HETSCHED_DISCOVERY`` when the node has no discovery label.
"""

from __future__ import annotations

__all__ = [
    "ADDRESS",
    "DISCOVERY",
    "DISCOVERY_ENV",
    "FAKE_DEVICES_ENV",
    "GPU_MODEL",
    "NODE",
    "RAY_NODE_ID",
    "SCHEDULABLE",
    "vendor_of",
]

NODE = "hetsched.io/node"
SCHEDULABLE = "hetsched.io/schedulable"
DISCOVERY = "hetsched.io/discovery"
GPU_MODEL = "hetsched.io/gpu-model"
ADDRESS = "hetsched.io/address"
#: set by Ray on every node
RAY_NODE_ID = "ray.io/node-id"

FAKE_DEVICES_ENV = "HETSCHED_FAKE_DEVICES"
DISCOVERY_ENV = "HETSCHED_DISCOVERY"


def vendor_of(model: str) -> str:
    """The vendor of a GPU model as Ray names accelerator types (``A100``, ``T4``,
    ``AMD-Instinct-MI300X-OAM``, ``Intel-GPU-Max-1550``) or as ``hetsched ray local`` does
    (``MI300X``): AMD and Intel by their prefixes, NVIDIA otherwise."""
    upper = model.upper()
    if upper.startswith(("AMD", "MI")):
        return "amd"
    if upper.startswith("INTEL"):
        return "intel"
    return "nvidia"
