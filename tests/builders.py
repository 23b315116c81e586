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


def openb_mini_trace(folder: Path) -> Path:
    """A tiny openb trace ``mini`` in ``folder``: nodes T4 x2, T4 x2, V100 x4 and a CPU-only
    node (left out of the cluster), and 25 pods of mixed shapes."""
    nodes = [
        "sn,cpu_milli,memory_mib,gpu,model",
        "n0,32000,131072,2,T4",
        "n1,32000,131072,2,T4",
        "n2,64000,262144,4,V100",
        "n3,16000,65536,0,",
    ]
    (folder / "openb_node_list_gpu_node.csv").write_text("\n".join(nodes) + "\n", "utf-8")
    pods = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"]
    shapes = ["4000,8192,1,500,", "8000,16384,1,1000,", "2000,4096,0,0,", "4000,8192,1,250,T4"]
    pods += [f"p{i:03d},{shapes[i % len(shapes)]}" for i in range(24)]
    pods.append("p100,16000,32768,2,1000,V100")
    (folder / "openb_pod_list_mini.csv").write_text("\n".join(pods) + "\n", "utf-8")
    return folder


def openb_grid_args(trace_dir: Path, out: Path, policies: str, *extra: str) -> list[str]:
    """``hetsched sim openb`` over the ``mini`` trace (:func:`openb_mini_trace`) as a grid:
    ``policies`` x seeds 1 and 2, one worker, results in ``out``."""
    return [
        "sim",
        "openb",
        "--trace-dir",
        str(trace_dir),
        "--traces",
        "mini",
        "--policies",
        policies,
        "--seeds",
        "1-2",
        "--workers",
        "1",
        *extra,
        "--out",
        str(out),
    ]
