"""Built-in plugins, one module each; importing this package registers them by name.

Filters: ``fit``, ``node-selector``, ``taints``. Scores: ``firstfit``, ``bestfit``,
``spread``, ``mostallocated``, ``dotprod``.
"""

from hetsched.plugins import allocated, bestfit, dotprod, firstfit, fit, labels, taints

__all__ = ["allocated", "bestfit", "dotprod", "firstfit", "fit", "labels", "taints"]
