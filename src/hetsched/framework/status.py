"""Statuses with reasons: every decision says why."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Code", "PluginError", "SortFailure", "Status"]


class Code(enum.StrEnum):
    #: the point passed
    SUCCESS = "success"
    #: not now; preemption or waiting may help
    UNSCHEDULABLE = "unschedulable"
    #: never on this cluster as it is; preemption cannot help
    UNRESOLVABLE = "unresolvable"
    #: a bug or an unexpected condition inside a plugin
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    @classmethod
    def success(cls) -> Status:
        return _SUCCESS

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE, reasons, plugin)

    @classmethod
    def unresolvable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNRESOLVABLE, reasons, plugin)

    @classmethod
    def error(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.ERROR, reasons, plugin)

    def __str__(self) -> str:
        prefix = f"{self.plugin}: " if self.plugin else ""
        return prefix + ("; ".join(self.reasons) or self.code.value)


_SUCCESS = Status()


class PluginError(Exception):
    """A plugin raised. The runtime raises this in place of the plugin's exception (from
    points that return arrays or keys), so the core can undo the attempt and explain it with
    ``Code.ERROR``; points that return a Status return ``Status.error`` instead."""

    def __init__(self, status: Status) -> None:
        super().__init__(str(status))
        self.status = status

    @classmethod
    def of(cls, plugin: str, exc: BaseException) -> PluginError:
        return cls(Status.error(failure_text(exc), plugin=plugin))


def failure_text(exc: BaseException) -> str:
    """How a plugin's exception reads in a status: its type and message."""
    text = str(exc)
    return f"failed: {type(exc).__name__}" + (f": {text}" if text else "")


class SortFailure:
    """The sort key of a job whose queue sort raised: after every other key (and equal to
    any other SortFailure), carrying the error for the job's explanation."""

    __slots__ = ("status",)

    def __init__(self, status: Status) -> None:
        self.status = status

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SortFailure)

    def __hash__(self) -> int:
        return 0

    def __lt__(self, other: object) -> bool:
        return False

    def __le__(self, other: object) -> bool:
        return isinstance(other, SortFailure)

    def __gt__(self, other: object) -> bool:
        return not isinstance(other, SortFailure)

    def __ge__(self, other: object) -> bool:
        return True
