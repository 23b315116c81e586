"""Columnar cluster state: free capacity, allocate and release, fork for what-if."""

from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.cluster.state import AllocationError, ClusterState, DeviceKind

__all__ = ["AllocationError", "ClusterState", "DeviceKind", "DeviceShare", "Placement"]
