"""Ordering policies for the scheduling queue; importing this package registers them.

``fifo``: submission order, strict or best-effort. ``priority``: priority with aging.
``drf``: dominant resource fairness. ``fairshare``: decayed past usage (half-life).
Importing it also registers the core's ``preemption`` post-filter, which lives with the core
in ``hetsched.scheduler.preemption``.
"""

from hetsched.queueing import drf, fairshare, fifo, priority
from hetsched.scheduler import preemption

__all__ = ["drf", "fairshare", "fifo", "preemption", "priority"]
