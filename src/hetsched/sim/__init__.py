"""Simulation: one engine driving the same core, trace loaders, metrics, reports, and the
reproductions as experiments on them.

Modules are imported directly (``from hetsched.sim.experiments.openb import run_openb``)
so that a command loads only what it uses.

- ``engine``: the one discrete-event engine, one loop on a virtual clock in two modes:
  event-driven (the scheduling core fed events; a profile's ``rounds`` runs the core's
  round mode here) and round-based (Gavel's rounds under the policies of
  :mod:`hetsched.rounds`);
- ``experiments``: the reproductions (openb fragmentation study, Gavel, Philly, Alibaba
  PAI), each declaring its workload, cluster, policies and metrics;
- workload sources and trace loaders: ``workload`` (the neutral CSV format), ``alibaba``
  (the Alibaba GPU trace v2023, openb), ``gavel`` (Gavel's traces and throughputs),
  ``gavel_synth``, ``philly``, ``synthetic``, ``rounds_workload`` (a workload as round
  jobs);
- what a run reports: ``outcomes`` (each job, in columns), ``accounting``, ``metrics``,
  ``replay`` and ``replay_report``, ``frontier`` (the fairness-throughput frontier plot).

The event-driven engine's main names and the workload format's are exported here.
"""

from hetsched.sim.engine import ClusterChange, EngineConfig, JobOutcome, SimResult, Simulator
from hetsched.sim.metrics import Summary, jain_index, summarize
from hetsched.sim.workload import (
    Workload,
    WorkloadError,
    WorkloadJob,
    read_workload,
    write_workload,
)
from hetsched.sim.workload_check import check_against_cluster

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
