"""Ordering policies for the scheduling queue; importing this package registers them.

``fifo``: submission order, strict or best-effort. ``priority``: priority with aging.
``drf``: dominant resource fairness. ``fairshare``: decayed past usage (half-life).
"""

from hetsched.queueing import drf, fairshare, fifo, priority, waiting

__all__ = ["drf", "fairshare", "fifo", "priority", "waiting"]
