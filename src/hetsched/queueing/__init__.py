"""Ordering policies for the scheduling queue; importing this package registers them.

``fifo``: submission order, strict or best-effort. ``priority``: priority with aging.
``drf``: dominant resource fairness. ``fairshare``: decayed past usage (half-life).
``waiting``: the core's waiting queue (why each job waits, where it stands), kept
incrementally; ``lanes``: its sorted lanes and their merge.
"""

from hetsched.queueing import drf, fairshare, fifo, lanes, priority, waiting

__all__ = ["drf", "fairshare", "fifo", "lanes", "priority", "waiting"]
