"""Ordering policies for the scheduling queue; importing this package registers them.

``fifo``: submission order, strict or best-effort. ``priority``: priority with aging.
``drf``: dominant resource fairness. ``fairshare``: decayed past usage (half-life).
``waiting``: the core's waiting queue (why each job waits, where it stands), kept
incrementally; ``lanes``: its sorted lanes and their merge; ``needs``: what a waiting job
needs to start (tasks at once, its shape, whether moving running jobs may help it).
"""

from hetsched.queueing import drf, fairshare, fifo, lanes, needs, priority, waiting

__all__ = ["drf", "fairshare", "fifo", "lanes", "needs", "priority", "waiting"]
