"""Builders for test clusters and jobs, and where the examples and traces are.

Imported as ``from builders import ...`` (``tests`` is on pytest's pythonpath)."""

from __future__ import annotations

from pathlib import Path

from hetsched.model.device import Device, Node
from hetsched.model.job import DeviceRequest, Job, TaskRequest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TRACES = ROOT.parent / "shared" / "traces"


def gpu_node(
    name: str,
    gpus: int = 8,
    model: str = "A100",
    cpu: int = 64_000,
    memory: int = 512 * 1024,
    memory_gib: int = 80,
    device_class: str = "gpu",
    labels: dict[str, str] | None = None,
) -> Node:
    devices = tuple(
        Device(
            f"{name}/{device_class}{i}",
            device_class,
            "nvidia",
            model,
            {"memory_gib": memory_gib},
        )
        for i in range(gpus)
    )
    return Node(name, cpu, memory, devices, labels or {})


def cpu_node(name: str, cpu: int = 96_000, memory: int = 384 * 1024) -> Node:
    return Node(name, cpu, memory)


def job(
    job_id: str,
    cpu: int = 1000,
    memory: int = 1024,
    gpus: int = 0,
    share: int = 1000,
    selector: str | None = None,
    replicas: int = 1,
    gang: int | None = None,
    **kwargs: object,
) -> Job:
    devices = (DeviceRequest.of("gpu", gpus, share, selector),) if gpus else ()
    return Job(
        job_id,
        TaskRequest(cpu, memory, devices),
        replicas=replicas,
        gang=gang,
        **kwargs,  # type: ignore[arg-type]
    )
