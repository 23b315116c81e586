"""What every driver shares: the action interpreter, the executor interface it drives, and
the order of simultaneous events.

Exports: :class:`Interpreter`, :class:`Executor`, :class:`Observer`, :class:`Start`,
:class:`Stop`, :class:`Exit`, :class:`EventOrder`, :func:`order_of`, :func:`in_order`.
"""

from hetsched.drivers.executor import Executor, Exit, Observer, Start, Stop
from hetsched.drivers.interpreter import Interpreter
from hetsched.drivers.order import EventOrder, in_order, order_of

__all__ = [
    "EventOrder",
    "Executor",
    "Exit",
    "Interpreter",
    "Observer",
    "Start",
    "Stop",
    "in_order",
    "order_of",
]
