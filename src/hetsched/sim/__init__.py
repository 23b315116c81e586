"""Simulation: trace loaders, experiments and their reports, driving the same core.

Modules are imported directly (``from hetsched.sim.openb import run_openb``) so that a
command loads only what it uses. ``alibaba``: the Alibaba GPU trace v2023 (openb) loader;
``openb``: the fragmentation experiment; ``openb_report``: its grid, table and plots.

Replays with departures: ``engine`` (the discrete-event driver), ``outcomes`` (what happened
to each job, in columns), ``workload`` (the neutral CSV format), ``gavel``, ``philly`` and
``synthetic`` (workload sources), ``metrics``, ``replay`` and ``replay_report``. Their main
names are exported here.

Rounds (Gavel's method): ``rounds_engine`` (allocation per round from
:mod:`hetsched.rounds`, work at each job's speed on the model it got) and ``gavel_rounds``
(one point of Gavel's continuous experiment: ``hetsched sim gavel``); ``frontier``: the
fairness-throughput frontier plot both ``sim replay --rounds`` and ``bench/gavel_grid.py``
draw.
"""

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
