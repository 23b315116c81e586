"""Simulation: the discrete-event engine, workloads and trace loaders, metrics, reports."""

from hetsched.sim.engine import ClusterChange, EngineConfig, JobOutcome, SimResult, Simulator
from hetsched.sim.metrics import Summary, jain_index, summarize
from hetsched.sim.workload import (
    Workload,
    WorkloadError,
    WorkloadJob,
    check_against_cluster,
    read_workload,
    write_workload,
)

__all__ = [
    "ClusterChange",
    "EngineConfig",
    "JobOutcome",
    "SimResult",
    "Simulator",
    "Summary",
    "Workload",
    "WorkloadError",
    "WorkloadJob",
    "check_against_cluster",
    "jain_index",
    "read_workload",
    "summarize",
    "write_workload",
]
