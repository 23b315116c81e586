"""The openb lower bound: no placement of the arrived pods can leave fewer GPUs unallocated.

Every policy of an openb run (one trace, one seed) sees the same arrival sequence, and at
an arrival point X % the same pods have arrived: the prefix of the sequence up to the first
pod that would push the GPU requested past X % of capacity (failed pods count as arrived;
:func:`arrived_prefix`). Whatever a policy did, online or offline, its allocation at X % is
a feasible packing of a *subset* of that prefix: every node's CPU, memory and GPUs
respected, a shared pod on one GPU, a k-GPU pod on k whole GPUs of one node, ``gpu_spec``
honoured. :func:`allocation_bound` bounds the GPU share of every such packing from above by
the optimum of a linear relaxation, solved by HiGHS (``scipy.optimize.milp`` with no integer
variables); so ``100 - bound / capacity`` is a lower bound on every policy's unallocated
GPU % at X %.

The relaxation, per node type t (same GPU model, GPU count, CPU and memory; N_t nodes):

- ``x[s, t]``: how many pods of shape s (CPU, memory, GPU count, share, allowed models) run
  on type t, only where one node of t could host one; over the types, at most the
  prefix's count of s;
- the type's N_t * G_t GPUs are bins of 1000 milli-units filled as an *arc flow*: each GPU
  is a path from 0 to 1000 whose arcs are the shares on it (or idle steps). A share-d pod
  needs a d-arc, a k-GPU pod k whole-GPU arcs. This is exact for one GPU (two 810 pods
  never share a GPU), and its LP is as strong as the configuration LP of bin packing;
- CPU and memory are pooled per type: the pods on t use at most N_t times one node's CPU
  and memory. This, and a k-GPU pod's GPUs not being tied to one node, is where it relaxes;
- maximise the GPU share placed. Non-GPU pods allocate no GPU and only take CPU, so an
  optimum leaves them out.

Every real packing is a feasible point of the program with the same GPU share, so the LP
optimum bounds every packing from above; requiring whole numbers could only lower it.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce

import numpy as np
import numpy.typing as npt

from hetsched.model.device import SHARE_UNITS, Node
from hetsched.sim.alibaba import TracePod

__all__ = [
    "Bound",
    "NodeType",
    "Shape",
    "allocation_bound",
    "arrived_prefix",
    "node_types",
    "shape_of",
]

#: (cpu milli, memory MiB, GPU count, share per GPU, allowed models): pods alike for the bound
Shape = tuple[int, int, int, int, tuple[str, ...]]


def shape_of(pod: TracePod) -> Shape:
    return (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.models)


def arrived_prefix(pods: Sequence[TracePod], capacity_milli: int, percent: int) -> int:
    """How many pods of the sequence have arrived at ``percent`` % arrived workload.

    The same reading as a run's curves: the state at X % is the one after the last arrival
    that keeps the GPU requested at or below X % of capacity.
    """
    arrived = 0
    for index, pod in enumerate(pods):
        arrived += pod.gpu_total_milli
        if 100 * arrived > percent * capacity_milli:
            return index
    return len(pods)


@dataclass(frozen=True, slots=True)
class NodeType:
    """Nodes alike for the bound: GPU model, GPU count, CPU and memory per node."""

    model: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    nodes: int

    def hosts(self, shape: Shape) -> bool:
        """Whether one node of this type, empty, could host a pod of ``shape``."""
        cpu, memory, gpus, _, models = shape
        return (
            gpus <= self.gpus
            and cpu <= self.cpu_milli
            and memory <= self.memory_mib
            and (not models or self.model in models)
        )


def node_types(nodes: Sequence[Node]) -> list[NodeType]:
    """The GPU nodes grouped by (model, GPUs, CPU, memory); each node has one GPU model."""
    counts: Counter[tuple[str, int, int, int]] = Counter()
    for node in nodes:
        models = {d.model for d in node.devices}
        if len(models) != 1:
            raise ValueError(f"node {node.name}: the bound needs exactly one GPU model per node")
        counts[(models.pop(), len(node.devices), node.cpu_milli, node.memory_mib)] += 1
    return [NodeType(m, g, c, mem, n) for (m, g, c, mem), n in sorted(counts.items())]


# -- the lower bound ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bound:
    """The relaxation's optimum: at least the GPU milli-units any packing allocates."""

    upper_milli: float
    #: per pod shape, how many of its pods the optimum leaves out (fractional)
    dropped: dict[Shape, float]
    wall_s: float


class _Program:
    """A sparse LP built row by row: maximise gain @ x, rows ``a @ x <= b`` or ``== b``,
    ``0 <= x <= upper``."""

    def __init__(self) -> None:
        self.gain: list[float] = []
        self.upper: list[float] = []
        self._rows: dict[bool, tuple[list[int], list[int], list[float], list[float]]] = {
            False: ([], [], [], []),
            True: ([], [], [], []),
        }

    def column(self, gain: float, upper: float) -> int:
        self.gain.append(gain)
        self.upper.append(upper)
        return len(self.gain) - 1

    def row(self, coefficients: dict[int, float], bound: float, equal: bool = False) -> None:
        rows, cols, vals, rhs = self._rows[equal]
        for col, value in coefficients.items():
            rows.append(len(rhs))
            cols.append(col)
            vals.append(value)
        rhs.append(bound)

    def solve(self) -> npt.NDArray[np.float64]:
        """The maximiser; raises RuntimeError if HiGHS does not find one."""
        # imported here: every CLI command imports this module, and scipy.optimize alone
        # costs about half a second of start-up
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_array

        constraints = []
        for equal in (False, True):
            rows, cols, vals, rhs = self._rows[equal]
            if rhs:
                shape = (len(rhs), len(self.gain))
                matrix = coo_array((vals, (rows, cols)), shape=shape).tocsr()
                high = np.array(rhs)
                low = high if equal else np.full(len(rhs), -np.inf)
                constraints.append(LinearConstraint(matrix, low, high))
        # milp without integrality is HiGHS's LP solver
        result = milp(
            -np.array(self.gain),
            constraints=constraints,
            bounds=Bounds(np.zeros(len(self.gain)), np.array(self.upper)),
        )
        if result.status != 0 or result.x is None:
            raise RuntimeError(f"the bound's LP was not solved: {result.message}")
        return np.asarray(result.x, np.float64)


def _add_type(
    program: _Program, kind: NodeType, shapes: Sequence[Shape], unit: int
) -> dict[Shape, int]:
    """The columns and rows of one node type; returns its ``x`` column per shape hosted."""
    hosted = [s for s in shapes if kind.hosts(s)]
    gpus_here = float(kind.nodes * kind.gpus)
    x = {s: program.column(float(s[2] * s[3]), math.inf) for s in hosted}
    for need, per_node in (
        ({col: float(s[0]) for s, col in x.items() if s[0]}, kind.cpu_milli),
        ({col: float(s[1]) for s, col in x.items() if s[1]}, kind.memory_mib),
    ):
        if need:
            program.row(need, float(kind.nodes * per_node))
    steps = SHARE_UNITS // unit
    sizes = sorted({s[3] // unit for s in hosted})
    inflow: list[dict[int, float]] = [{} for _ in range(steps + 1)]
    outflow: list[dict[int, float]] = [{} for _ in range(steps + 1)]
    arcs: dict[int, list[int]] = {size: [] for size in sizes}
    for start in range(steps):
        idle = program.column(0.0, gpus_here)
        outflow[start][idle] = 1.0
        inflow[start + 1][idle] = 1.0
        for size in sizes:
            if start + size <= steps:
                arc = program.column(0.0, gpus_here)
                outflow[start][arc] = 1.0
                inflow[start + size][arc] = 1.0
                arcs[size].append(arc)
    program.row(outflow[0], gpus_here)  # at most N_t * G_t GPUs (paths)
    for position in range(1, steps):  # what flows in flows on
        balance = dict(inflow[position])
        for col, value in outflow[position].items():
            balance[col] = balance.get(col, 0.0) - value
        program.row(balance, 0.0, equal=True)
    for size in sizes:  # every share-d pod (k per k-GPU pod) rides a d-arc
        need = {arc: -1.0 for arc in arcs[size]}
        for shape, col in x.items():
            if shape[3] // unit == size:
                need[col] = float(shape[2])
        program.row(need, 0.0)
    return x


def allocation_bound(nodes: Sequence[Node], pods: Sequence[TracePod]) -> Bound:
    """The LP bound on the GPU milli-units any packing of a subset of ``pods`` allocates."""
    started = time.perf_counter()
    counts = Counter(shape_of(p) for p in pods if p.num_gpu)
    if not counts:
        return Bound(0.0, {}, time.perf_counter() - started)
    unit = reduce(math.gcd, {s[3] for s in counts}, SHARE_UNITS)
    shapes = list(counts)
    program = _Program()
    columns = [_add_type(program, kind, shapes, unit) for kind in node_types(nodes)]
    for shape in shapes:
        cols = {x[shape]: 1.0 for x in columns if shape in x}
        if cols:
            program.row(cols, float(counts[shape]))
    solution = program.solve()
    placed: dict[Shape, float] = dict.fromkeys(shapes, 0.0)
    for x in columns:
        for shape, col in x.items():
            placed[shape] += float(solution[col])
    upper = sum(value * shape[2] * shape[3] for shape, value in placed.items())
    dropped = {s: counts[s] - placed[s] for s in shapes if counts[s] - placed[s] > 1e-6}
    return Bound(upper, dropped, time.perf_counter() - started)
