"""Queues the service accepts jobs into: who may submit, and hard quotas.

```yaml
queues:
  - name: default
  - name: team-a
    users: [alice, bob]          # who may submit; omitted means everyone
    quota: {cpu: "64", memory: 256Gi, gpu: 8, fpga: 1}
```

A job whose own request is larger than its queue's hard quota could never run in it and is
refused at submission (403). Without a file there is one queue, ``default``, open to all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator

from hetsched.model.device import SHARE_UNITS
from hetsched.model.job import Job
from hetsched.model.quantity import parse_cpu, parse_memory
from hetsched.model.specs import SpecError, _Strict, format_errors, load_yaml

__all__ = ["QueueSpec", "QueuesSpec", "job_demand", "load_queues"]


class QueueSpec(_Strict):
    name: str = Field(min_length=1, max_length=63)
    users: list[str] | None = None
    #: hard limits: cpu (cores), memory (quantity), and device classes (counts)
    quota: dict[str, str | int | float] = Field(default_factory=dict)

    @field_validator("quota")
    @classmethod
    def _quota(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, item in value.items():
            if key == "cpu":
                parse_cpu(item)
            elif key == "memory":
                parse_memory(item)
            elif not isinstance(item, int | float) or item < 0:
                raise ValueError(f"{key}: expected a device count, got {item!r}")
        return value

    def limits(self) -> dict[str, float]:
        """Quota in the units job_demand uses: cpu millicores, memory MiB, device counts."""
        out: dict[str, float] = {}
        for key, item in self.quota.items():
            if key == "cpu":
                out[key] = parse_cpu(item)
            elif key == "memory":
                out[key] = parse_memory(item)
            else:
                out[key] = float(item)
        return out

    def admits(self, user: str) -> bool:
        return self.users is None or user in self.users

    def over_quota(self, job: Job) -> str | None:
        demand = job_demand(job)
        for key, limit in self.limits().items():
            if demand.get(key, 0) > limit:
                return (
                    f"queue {self.name}: the job asks for {demand[key]:g} {key} "
                    f"(all tasks at once), over the queue's hard quota of {limit:g}"
                )
        return None


class QueuesSpec(_Strict):
    queues: list[QueueSpec] = Field(min_length=1)

    def by_name(self) -> dict[str, QueueSpec]:
        return {q.name: q for q in self.queues}


def job_demand(job: Job) -> dict[str, float]:
    """What all of a job's tasks hold at once: cpu millicores, memory MiB, devices by class
    (a fractional share counts as its fraction)."""
    request = job.resources
    out: dict[str, float] = {
        "cpu": float(request.cpu_milli * job.replicas),
        "memory": float(request.memory_mib * job.replicas),
    }
    for device in request.devices:
        choice = device.primary
        amount = choice.count * min(choice.share, SHARE_UNITS) / SHARE_UNITS
        out[choice.device_class] = out.get(choice.device_class, 0.0) + amount * job.replicas
    return out


def load_queues(path: str | Path | None) -> QueuesSpec:
    if path is None:
        return QueuesSpec(queues=[QueueSpec(name="default")])
    try:
        return QueuesSpec.model_validate(load_yaml(path))
    except ValidationError as exc:
        raise SpecError(format_errors(exc), str(path)) from None
