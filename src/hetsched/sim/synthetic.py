"""Synthetic workloads: Poisson arrivals, a GPU-count mix, a device-model mix, and task
durations from the Philly runtime distribution. Deterministic for a seed.

The default GPU-count mix is the "Philly distribution" Gavel's simulator uses (1 GPU: 70%,
2: 10%, 4: 15%, 8: 5%). A job asking for more GPUs than a node holds becomes a gang of
equal tasks (16 GPUs on 8-GPU nodes: 2 tasks of 8).
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from hetsched.model.device import Device, Node
from hetsched.model.job import DeviceRequest, Job, TaskRequest
from hetsched.sim.lazyrows import LazyRows
from hetsched.sim.philly import RuntimeDistribution
from hetsched.sim.workload import Workload, WorkloadJob

__all__ = [
    "CLUSTER_MIX",
    "PHILLY_GPU_MIX",
    "SyntheticJobs",
    "SyntheticSpec",
    "generate",
    "gpus_per_node",
    "rate_for_load",
    "split_gang",
    "synthetic_cluster",
]

#: GPUs per job -> probability (Gavel's "Philly distribution")
PHILLY_GPU_MIX: Mapping[int, float] = MappingProxyType({1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05})


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    """Parameters of a synthetic workload.

    ``model_mix`` maps a device model to the weight of jobs pinned to it by a selector;
    the key ``""`` stands for jobs that take any model. ``users`` are drawn with Zipf-like
    weights (user i with weight 1/(i+1)), so a few users submit most jobs, as in real
    clusters; user i submits to queue ``q<i mod queues>``.
    """

    jobs: int = 1000
    #: mean arrivals per hour
    rate_per_h: float = 60.0
    gpu_mix: Mapping[int, float] = field(default_factory=lambda: dict(PHILLY_GPU_MIX))
    model_mix: Mapping[str, float] = field(default_factory=lambda: {"": 1.0})
    device_class: str = "gpu"
    users: int = 8
    queues: int = 2
    #: priority -> weight
    priorities: Mapping[int, float] = field(default_factory=lambda: {0: 0.8, 1: 0.2})
    cpu_per_gpu_milli: int = 4000
    memory_per_gpu_mib: int = 16 * 1024
    #: the most GPUs one task may take (the largest node); bigger jobs become gangs
    gpus_per_node: int = 8
    #: per model, the most GPUs of it one node has (for jobs pinned to that model)
    model_gpus_per_node: Mapping[str, int] = field(default_factory=dict)
    durations: RuntimeDistribution = field(default_factory=RuntimeDistribution)
    seed: int = 0

    def __post_init__(self) -> None:
        problems = []
        if self.jobs < 0:
            problems.append(f"jobs must be >= 0, got {self.jobs}")
        if self.rate_per_h <= 0:
            problems.append(f"rate_per_h must be > 0, got {self.rate_per_h}")
        for name, mix in (
            ("gpu_mix", self.gpu_mix),
            ("model_mix", self.model_mix),
            ("priorities", self.priorities),
        ):
            if not mix or any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
                problems.append(f"{name} needs non-negative weights with a positive sum")
        if any(g < 1 for g in self.gpu_mix):
            problems.append("gpu_mix keys must be >= 1")
        if self.users < 1 or self.queues < 1 or self.gpus_per_node < 1:
            problems.append("users, queues and gpus_per_node must be >= 1")
        if problems:
            raise ValueError("; ".join(problems))


def split_gang(gpus: int, per_node: int) -> tuple[int, int]:
    """(tasks, GPUs per task) for a job of ``gpus`` GPUs on nodes of ``per_node``: the
    fewest equal tasks that each fit a node (12 on 8-GPU nodes: 2 x 6)."""
    if gpus <= per_node:
        return 1, gpus
    tasks = -(-gpus // per_node)
    while gpus % tasks or gpus // tasks > per_node:
        tasks += 1
    return tasks, gpus // tasks


def _probabilities(weights: Sequence[float]) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
    array = np.asarray(weights, dtype=np.float64)
    return np.asarray(array / array.sum(), dtype=np.float64)


def generate(spec: SyntheticSpec) -> Workload:
    """Draw ``spec.jobs`` jobs; the same spec (seed included) gives the same workload."""
    rng = np.random.default_rng(spec.seed)
    n = spec.jobs
    gaps = rng.exponential(3600.0 / spec.rate_per_h, n)
    submit = np.round(np.cumsum(gaps) - (gaps[0] if n else 0.0), 3)
    sizes = list(spec.gpu_mix)
    gpus = rng.choice(np.asarray(sizes), size=n, p=_probabilities(list(spec.gpu_mix.values())))
    models = list(spec.model_mix)
    model_pick = rng.choice(len(models), size=n, p=_probabilities(list(spec.model_mix.values())))
    user_weights = [1.0 / (i + 1) for i in range(spec.users)]
    user = rng.choice(spec.users, size=n, p=_probabilities(user_weights))
    levels = list(spec.priorities)
    priority = rng.choice(
        np.asarray(levels), size=n, p=_probabilities(list(spec.priorities.values()))
    )
    duration = spec.durations.draw(rng, n)
    selectors = {
        m: (f'device.attributes["model"] in ["{m}"]' if m else None) for m in spec.model_mix
    }
    # a job's shape: (GPU count, model) as one number; one TaskRequest per shape drawn
    size_index = np.zeros(max(sizes, default=0) + 1, dtype=np.int64)
    size_index[np.asarray(sizes, dtype=np.int64)] = np.arange(len(sizes))
    kinds = size_index[gpus.astype(np.int64)] * len(models) + model_pick
    requests: dict[int, tuple[int, TaskRequest]] = {}
    for kind in np.unique(kinds).tolist():
        size, model = int(sizes[kind // len(models)]), models[kind % len(models)]
        per_node = spec.model_gpus_per_node.get(model, spec.gpus_per_node)
        tasks, per_task = split_gang(size, per_node)
        device = DeviceRequest.of(spec.device_class, per_task, selector=selectors[model])
        request = TaskRequest(
            spec.cpu_per_gpu_milli * per_task, spec.memory_per_gpu_mib * per_task, (device,)
        )
        requests[kind] = (tasks, request)
    jobs = SyntheticJobs(
        submit.astype(np.float64),
        duration.astype(np.float64),
        kinds.astype(np.int32),
        user.astype(np.int32),
        priority.astype(np.int64),
        requests,
        spec.queues,
    )
    return Workload(jobs, f"synthetic(seed={spec.seed}, jobs={n})")


def _packed(typecode: str, values: np.ndarray[Any, Any]) -> array[Any]:
    packed = array(typecode)
    packed.frombytes(values.astype(np.dtype(typecode)).tobytes())
    return packed


class SyntheticJobs(LazyRows[WorkloadJob]):
    """The jobs of a synthetic workload, kept as columns (about 30 bytes a job): job ``i``
    is built when it is read, so a replay that streams arrivals never holds a million job
    objects. Jobs of one shape share one ``TaskRequest``; the same index gives an equal
    job every time."""

    def __init__(
        self,
        submit: np.ndarray[tuple[int], np.dtype[np.float64]],
        duration: np.ndarray[tuple[int], np.dtype[np.float64]],
        kind: np.ndarray[tuple[int], np.dtype[np.int32]],
        user: np.ndarray[tuple[int], np.dtype[np.int32]],
        priority: np.ndarray[tuple[int], np.dtype[np.int64]],
        requests: Mapping[int, tuple[int, TaskRequest]],
        queues: int,
    ) -> None:
        # plain arrays: reading one value is a few times cheaper than from numpy, at the
        # same 8 (or 4) bytes a job
        self._submit = _packed("d", submit)
        self._duration = _packed("d", duration)
        self._kind = _packed("i", kind)
        self._user = _packed("i", user)
        self._priority = _packed("q", priority)
        self._size = int(submit.size)
        self._requests = requests
        users = int(user.max()) + 1 if user.size else 0
        self._names = tuple((f"user{u}", f"q{u % queues}") for u in range(users))

    def __len__(self) -> int:
        return self._size

    def _row(self, i: int) -> WorkloadJob:
        tasks, request = self._requests[self._kind[i]]
        user, queue = self._names[self._user[i]]
        job = Job(
            id=f"s{i:06d}",
            resources=request,
            user=user,
            queue=queue,
            priority=self._priority[i],
            replicas=tasks,
            submit_time=self._submit[i],
        )
        return WorkloadJob(job, self._duration[i])

    def __repr__(self) -> str:
        return f"SyntheticJobs({len(self)} jobs)"


def gpus_per_node(nodes: Sequence[Node], device_class: str = "gpu") -> dict[str, int]:
    """Per device model (and ``""`` for any model), the most such devices one node has."""
    out: dict[str, int] = {}
    for node in nodes:
        counts: dict[str, int] = {}
        for device in node.devices:
            if device.device_class == device_class:
                counts[device.model] = counts.get(device.model, 0) + 1
        for model, count in counts.items():
            out[model] = max(out.get(model, 0), count)
        out[""] = max(out.get("", 0), sum(counts.values()))
    return out


def rate_for_load(spec: SyntheticSpec, nodes: Sequence[Node], load: float) -> float:
    """Arrivals per hour that keep ``load`` (0..1) of the cluster's GPUs busy on average:
    load * GPUs / E[GPUs per job * duration], with the duration mean estimated by draws."""
    total = sum(1 for node in nodes for d in node.devices if d.device_class == spec.device_class)
    weights = _probabilities(list(spec.gpu_mix.values()))
    mean_gpus = float(np.dot(np.asarray(list(spec.gpu_mix), dtype=np.float64), weights))
    work_s = mean_gpus * spec.durations.mean()
    return load * total / work_s * 3600.0


#: (model, GPUs per node, memory_gib, CPU cores, memory GiB, weight) of synthetic clusters
CLUSTER_MIX: tuple[tuple[str, int, int, int, int, float], ...] = (
    ("V100", 8, 32, 64, 512, 0.4),
    ("P100", 4, 16, 32, 256, 0.3),
    ("K80", 4, 12, 32, 256, 0.2),
    ("A100", 8, 80, 96, 1024, 0.1),
)


def synthetic_cluster(nodes: int, seed: int = 0) -> list[Node]:
    """A heterogeneous GPU cluster of ``nodes`` nodes drawn from :data:`CLUSTER_MIX`."""

    rng = np.random.default_rng(seed)
    weights = _probabilities([m[5] for m in CLUSTER_MIX])
    picks = rng.choice(len(CLUSTER_MIX), size=nodes, p=weights)
    out: list[Node] = []
    for i, pick in enumerate(picks):
        model, gpus, gib, cores, mem_gib, _ = CLUSTER_MIX[int(pick)]
        name = f"{model.lower()}-{i}"
        devices = tuple(
            Device(f"{name}/gpu{k}", "gpu", "nvidia", model, {"memory_gib": gib})
            for k in range(gpus)
        )
        out.append(Node(name, cores * 1000, mem_gib * 1024, devices, {"model": model}))
    return out
