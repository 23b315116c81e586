"""Ordering policies for the scheduling queue; importing this package registers them.

``fifo``: submission order.
"""

from hetsched.queueing import fifo

__all__ = ["fifo"]
