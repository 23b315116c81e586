"""Fair shares in reference-device units: the profile's ``fairness`` section.

With ``fairness: {units: normalized, reference_model: V100}``, what a job holds of a device
counts under the device's class flavor (``gpu``) as its rate on the device's model over its
rate on the reference model, from the job's speed model (its ``speed`` map, else its
``job_type`` in the throughput table the driver handed the core). A job three times faster
on an A100 than on a V100 is charged 3 GPUs for each A100 it holds, so DRF, fair share and
quotas count what the device is worth to the job. ``class/model`` flavors (``gpu/A100``)
keep counting devices.

A job is charged plain devices (scale 1) when the switch is off, when it has no speed
information or runs equally fast everywhere, when its speed cannot be resolved, and when
it makes no progress on the reference model (there is no reference to measure it by). So
with no speed information anywhere, normalized units decide exactly as device units do.
Pure: the rates come from the job's speed model, never from clocks.
"""

from __future__ import annotations

from hetsched.cluster.state import ClusterState
from hetsched.cluster.usage import UnitScale
from hetsched.framework.profile import FairnessSpec
from hetsched.model.job import Job
from hetsched.model.speed import SpeedError, SpeedTable, resolve

__all__ = ["Units"]


class Units:
    """How a job's device shares count in its class flavors (see the module docstring)."""

    def __init__(self, spec: FairnessSpec) -> None:
        self.spec = spec
        self.reference = spec.reference_model if spec.normalized else None

    def scale(self, job: Job, table: SpeedTable | None) -> UnitScale | None:
        """Device model -> units one device unit of that model counts for ``job``; None
        where every model counts 1 (see the module docstring)."""
        if self.reference is None or not job.speed.known:
            return None
        try:
            speeds = resolve(job, table)
        except SpeedError:
            return None
        base = speeds.on(self.reference)
        if speeds.uniform or base <= 0:
            return None

        def scale(model: str) -> float:
            return speeds.on(model) / base

        return scale

    def floor(self, job: Job, table: SpeedTable | None, state: ClusterState) -> float:
        """The least one device unit can count for ``job`` on any device model of the
        classes it asks for in ``state`` (1.0 without normalization): what a check made
        before placement charges, so it never refuses what a placement would pass."""
        scale = self.scale(job, table)
        if scale is None:
            return 1.0
        classes = {r.primary.device_class for r in job.resources.devices}
        models = {k.model for k in state.kinds if k.device_class in classes}
        return min((scale(m) for m in models), default=1.0)
