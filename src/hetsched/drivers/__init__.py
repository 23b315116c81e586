"""What every driver shares: the action interpreter, the executor protocol it drives (one
module, :mod:`hetsched.drivers.executor`), and the order of simultaneous events.

Exports: :class:`Interpreter`, :class:`Executor` and its capabilities (:class:`Polled`,
:class:`Adopts`, :class:`Fences`, :class:`GivesNotice`, :class:`KillsByPid`,
:class:`KeepsExits`,
:class:`ProcessTasks`, :class:`ProcessExecutor`), :class:`Observer`, :class:`Start`,
:class:`Launch`, :class:`RunAs`, :class:`Stop`, :class:`Exit`, :class:`TaskView`,
:class:`EventOrder`, :func:`order_of`, :func:`in_order`.
"""

from hetsched.drivers.executor import (
    Adopts,
    Executor,
    Exit,
    Fences,
    GivesNotice,
    KeepsExits,
    KillsByPid,
    Launch,
    Observer,
    Polled,
    ProcessExecutor,
    ProcessTasks,
    RunAs,
    Start,
    Stop,
    TaskView,
)
from hetsched.drivers.interpreter import Interpreter
from hetsched.drivers.order import EventOrder, in_order, order_of

__all__ = [
    "Adopts",
    "EventOrder",
    "Executor",
    "Exit",
    "Fences",
    "GivesNotice",
    "Interpreter",
    "KeepsExits",
    "KillsByPid",
    "Launch",
    "Observer",
    "Polled",
    "ProcessExecutor",
    "ProcessTasks",
    "RunAs",
    "Start",
    "Stop",
    "TaskView",
    "in_order",
    "order_of",
]
