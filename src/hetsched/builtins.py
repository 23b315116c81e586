"""The built-in plugins: the one place that says which plugins hetsched provides.

Listed under the ``hetsched.plugins`` entry points (``pyproject.toml``), so the framework
finds them without importing any plugin package itself; a new built-in plugin is added to
:func:`plugins` here.
"""

from __future__ import annotations

from hetsched.plugins.allocated import MostAllocated, Spread
from hetsched.plugins.bestfit import BestFit
from hetsched.plugins.dotprod import DotProd
from hetsched.plugins.fgd import FGD
from hetsched.plugins.fgdplus import Best, FGDPlus
from hetsched.plugins.firstfit import FirstFit
from hetsched.plugins.fit import Fit
from hetsched.plugins.gpuclustering import GpuClustering
from hetsched.plugins.gpupacking import GpuPacking
from hetsched.plugins.labels import NodeSelector
from hetsched.plugins.randomfit import RandomFit
from hetsched.plugins.speed import Speed
from hetsched.plugins.stranding import Stranding
from hetsched.plugins.taints import Taints
from hetsched.queueing.drf import Drf
from hetsched.queueing.fairshare import Fairshare
from hetsched.queueing.fifo import Fifo
from hetsched.queueing.priority import Priority
from hetsched.scheduler.preemption import Preemption

__all__ = ["plugins"]


def plugins() -> list[type]:
    """Every built-in plugin class: placement (filters and scores), queue sorts, and the
    core's preemption post-filter."""
    return [
        Fit,
        NodeSelector,
        Taints,
        FirstFit,
        BestFit,
        Spread,
        MostAllocated,
        DotProd,
        RandomFit,
        GpuPacking,
        GpuClustering,
        FGD,
        FGDPlus,
        Best,
        Stranding,
        Speed,
        Fifo,
        Priority,
        Drf,
        Fairshare,
        Preemption,
    ]
