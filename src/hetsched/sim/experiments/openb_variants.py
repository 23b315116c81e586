"""CPU-heavy variants of the openb pod list, made the way the trace's own ``cpuXYZ`` files
were made, for testing policies on workloads no tuning saw.

The trace's ``cpu050``, ``cpu100`` and ``cpu200`` keep every GPU pod of the default pod
list and change only how many non-GPU pods there are: XY.Z % of all pods (5, 10, 20 %).
A name ``cpuXYZ`` whose file the trace does not have (``cpu300``, ``cpu400``, ``cpu600``)
is made here the same way: the default list's GPU pods, in their order, then non-GPU pods
drawn from the default list's non-GPU pods (each of them once while enough are needed,
then uniformly with replacement, with a generator seeded by the variant's name) until they
are XY.Z % of the pods. The draw is fixed by the name, so a variant is the same workload on
every machine and in every run; the run's own seed then shuffles and resamples it as it
does any pod list.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from hetsched.sim.alibaba import TracePod

__all__ = ["CPU_VARIANT", "cpu_share_permille", "cpu_variant"]

#: ``cpuXYZ``: XY.Z % of the pods ask for no GPU
CPU_VARIANT = re.compile(r"cpu(\d{3})")


def cpu_share_permille(name: str) -> int | None:
    """The non-GPU share a ``cpuXYZ`` name asks for, in tenths of a percent (``cpu400``:
    400); None for any other name."""
    match = CPU_VARIANT.fullmatch(name)
    if match is None:
        return None
    share = int(match.group(1))
    return share if 0 < share < 1000 else None


def cpu_variant(name: str, default: Sequence[TracePod]) -> list[TracePod]:
    """The pod list ``name`` (``cpuXYZ``) made from the ``default`` pod list (see the
    module docstring); ValueError if ``name`` is not such a name or the default list has
    no pod of either kind."""
    share = cpu_share_permille(name)
    if share is None:
        raise ValueError(f"{name!r} is not a cpuXYZ variant (XYZ: 001-999, tenths of a percent)")
    gpu = [p for p in default if p.num_gpu]
    cpu = [p for p in default if not p.num_gpu]
    if not gpu or not cpu:
        raise ValueError("the default pod list needs both GPU and non-GPU pods")
    wanted = round(len(gpu) * share / (1000 - share))
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    picks = list(range(min(wanted, len(cpu))))
    if wanted > len(cpu):
        picks += rng.integers(0, len(cpu), wanted - len(cpu)).tolist()
    # every pod keeps a name of its own: the draws of one pod are told apart
    drawn = [replace(cpu[i], name=f"{cpu[i].name}-{name}-{n}") for n, i in enumerate(picks)]
    return gpu + drawn
