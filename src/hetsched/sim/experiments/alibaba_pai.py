"""Alibaba PAI: the Philly-like stream on the machines of Alibaba's PAI GPU cluster (2020).

- **Cluster**: the trace's machine list (:mod:`hetsched.sim.pai`): P100 and T4 machines
  with 2 GPUs, V100, V100M32 and MISC machines with 8, and CPU-only machines, kept at
  ``scale`` of each server shape so a small cluster has the whole one's mix.
- **Workload**: the trace's job tables are not in the data at hand, so the stream is
  :mod:`.philly`'s (Gavel's GPU-count mix, Philly's runtimes) at ``load`` of this
  cluster's GPUs; jobs take any GPU type.
- **Policies** and **metrics**: :mod:`.philly`'s (the core's queue policies; JCT, wait,
  GPU utilization, Jain's index, worst finish-time fairness).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsched.model.device import Node
from hetsched.sim.experiments.philly import PhillyExperiment
from hetsched.sim.pai import MACHINE_FILE, load_machines

__all__ = ["PaiExperiment"]


@dataclass(frozen=True, slots=True)
class PaiExperiment:
    """One run on ``scale`` of the PAI machines in ``trace_dir`` (the folder of
    ``pai_machine_spec.csv``)."""

    trace_dir: Path
    scale: float = 0.02
    stream: PhillyExperiment = field(default_factory=PhillyExperiment)

    def cluster(self) -> list[Node]:
        """The GPU machines of the trace at ``scale`` (CPU-only machines run no job of
        this stream, so they are left out)."""
        return load_machines(self.trace_dir / MACHINE_FILE, self.scale, gpu_only=True)

    def run(self) -> list[dict[str, Any]]:
        """One row per policy (see :meth:`PhillyExperiment.run`)."""
        return self.stream.run(self.cluster())
