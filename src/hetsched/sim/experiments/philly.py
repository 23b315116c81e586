"""Philly: a stream shaped like Microsoft's Philly trace, replayed with departures under the
core's queue policies.

- **Workload**: :func:`hetsched.sim.synthetic.generate`: Poisson arrivals at the rate that
  offers ``load`` of the cluster's GPUs, Gavel's Philly GPU-count mix (1/2/4/8 GPUs at
  70/10/15/5 %), Zipf-like users, and durations drawn from Philly's runtime distribution
  (:mod:`hetsched.sim.philly`: the trace's file when given, else its quantiles), capped at
  ``max_duration_s``.
- **Cluster**: the nodes given (a cluster file, or another experiment's inventory such as
  :mod:`.alibaba_pai`'s).
- **Policies**: the built-in queue policies registered in this build (fifo, priority, drf,
  fairshare), or those named.
- **Metrics**: per policy, mean and p99 job completion time and mean wait (hours), mean
  GPU utilization, Jain's index over users and the worst finish-time fairness, from the
  replay's :class:`~hetsched.sim.metrics.Summary`.

Every policy replays the same workload with the same seed on the engine's event-driven
mode, so the rows differ by policy alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetsched.model.device import Node
from hetsched.model.lifecycle import JobState
from hetsched.sim.engine import EngineConfig
from hetsched.sim.metrics import Summary
from hetsched.sim.philly import RuntimeDistribution
from hetsched.sim.replay import available_policies, policy_from_name, replay
from hetsched.sim.synthetic import SyntheticSpec, generate, gpus_per_node, rate_for_load
from hetsched.sim.workload import Workload

__all__ = ["METRICS", "PhillyExperiment", "gpu_models", "metrics_of"]

#: the columns of a result row besides ``policy``
METRICS: tuple[str, ...] = (
    "jobs",
    "finished",
    "jct_mean_h",
    "jct_p99_h",
    "wait_mean_h",
    "gpu_utilization",
    "jain_users",
    "ftf_worst",
)


def gpu_models(nodes: Sequence[Node]) -> dict[str, int]:
    """GPUs per model of ``nodes`` (the weights of the mean GPU utilization)."""
    out: dict[str, int] = {}
    for node in nodes:
        for device in node.devices:
            if device.device_class == "gpu":
                out[device.model] = out.get(device.model, 0) + 1
    return out


def metrics_of(summary: Summary, models: dict[str, int]) -> dict[str, Any]:
    """The experiment's metrics from a replay's summary (rounded for a report);
    ``models``: GPUs per model, which weigh each model's utilization."""
    total = sum(models.values())
    busy = sum(summary.utilization.get(m, 0.0) * n for m, n in models.items())
    return {
        "jobs": summary.jobs,
        "finished": summary.states.get(JobState.SUCCEEDED, 0),
        "jct_mean_h": round(summary.jct["mean"] / 3600.0, 4),
        "jct_p99_h": round(summary.jct["p99"] / 3600.0, 4),
        "wait_mean_h": round(summary.wait["mean"] / 3600.0, 4),
        "gpu_utilization": round(busy / total, 4) if total else 0.0,
        "jain_users": round(summary.jain_users, 4),
        "ftf_worst": round(summary.ftf_worst, 4),
    }


@dataclass(frozen=True, slots=True)
class PhillyExperiment:
    """One run: ``jobs`` jobs at ``load`` of the cluster's GPUs, drawn with ``seed``."""

    jobs: int = 500
    load: float = 0.8
    seed: int = 0
    #: queue policies to compare (empty: every built-in one registered now)
    policies: tuple[str, ...] = ()
    #: Philly's runtime CSV (None: its quantiles)
    runtimes: Path | None = None
    max_duration_s: float | None = 7 * 86400.0
    #: virtual seconds between the engine's ticks while jobs wait
    tick_s: float = 60.0

    def workload(self, nodes: Sequence[Node]) -> Workload:
        """The job stream for ``nodes`` (the rate that offers ``load`` of their GPUs)."""
        cap = self.max_duration_s
        durations = (
            RuntimeDistribution.from_file(self.runtimes, cap)
            if self.runtimes is not None
            else RuntimeDistribution(max_s=cap)
        )
        largest = max((len(n.devices) for n in nodes), default=8) or 8
        spec = SyntheticSpec(
            jobs=self.jobs,
            gpus_per_node=largest,
            model_gpus_per_node=gpus_per_node(nodes),
            durations=durations,
            seed=self.seed,
        )
        rate = rate_for_load(spec, nodes, self.load)
        return generate(SyntheticSpec(**{**_fields(spec), "rate_per_h": rate}))

    def run(self, nodes: Sequence[Node]) -> list[dict[str, Any]]:
        """One row per policy: ``policy`` and the :data:`METRICS`."""
        workload = self.workload(nodes)
        names = self.policies or tuple(available_policies())
        config = EngineConfig(tick_s=self.tick_s)
        models = gpu_models(nodes)
        rows = []
        for name in names:
            result = replay(nodes, workload, policy_from_name(name), self.seed, config)
            rows.append({"policy": name, **metrics_of(result.summary, models)})
        return rows


def _fields(spec: SyntheticSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in SyntheticSpec.__dataclass_fields__}
