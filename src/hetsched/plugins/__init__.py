"""Built-in plugins, one module each; importing this package registers them by name.

Filters: ``fit``, ``node-selector``, ``taints``. Scores: ``firstfit``, ``bestfit``,
``spread``, ``mostallocated``, ``dotprod``, ``random``, ``gpupacking``, ``gpuclustering``,
``fgd`` (the last four from the GPU-sharing fragmentation study), ``fgdplus`` (FGD with CPU
balance, gap values and model reservation, also registered as ``best``; see
docs/fragmentation.md), ``stranding`` (keeps accelerators fed with CPU and memory;
docs/heterogeneity.md), ``speed`` (the device model that runs the job fastest;
docs/heterogeneity.md).
"""

from hetsched.plugins import (
    allocated,
    bestfit,
    dotprod,
    fgd,
    fgdplus,
    firstfit,
    fit,
    gpuclustering,
    gpupacking,
    labels,
    randomfit,
    speed,
    stranding,
    taints,
)

__all__ = [
    "allocated",
    "bestfit",
    "dotprod",
    "fgd",
    "fgdplus",
    "firstfit",
    "fit",
    "gpuclustering",
    "gpupacking",
    "labels",
    "randomfit",
    "speed",
    "stranding",
    "taints",
]
