"""Built-in plugins, one module each; importing this package registers them by name.

Filters: ``fit``, ``node-selector``, ``taints``. Scores: ``firstfit``, ``bestfit``,
``spread``, ``mostallocated``, ``dotprod``, ``random``, ``gpupacking``, ``gpuclustering``,
``fgd`` (the last four from the GPU-sharing fragmentation study; see docs/fragmentation.md),
``stranding`` (keeps accelerators fed with CPU and memory; docs/heterogeneity.md).
"""

from hetsched.plugins import (
    allocated,
    bestfit,
    dotprod,
    fgd,
    firstfit,
    fit,
    gpuclustering,
    gpupacking,
    labels,
    randomfit,
    stranding,
    taints,
)

__all__ = [
    "allocated",
    "bestfit",
    "dotprod",
    "fgd",
    "firstfit",
    "fit",
    "gpuclustering",
    "gpupacking",
    "labels",
    "randomfit",
    "stranding",
    "taints",
]
