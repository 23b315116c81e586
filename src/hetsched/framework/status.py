"""Statuses with reasons: every decision says why."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Code", "Status"]


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
