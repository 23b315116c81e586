"""Checkpoints: what a job says about saving its state, and a checkpoint it saved.

A job that declares :class:`Checkpointing` is *checkpointable*: when it is chosen to stop
(preemption, quota reclaim, migration) it first gets a **notice** (its ``signal``, and
``notice_s`` seconds to save), and whenever it runs again, on any node, it resumes from the
last checkpoint it reported. ``interval_s`` says how often it saves on its own:

- ``None``: only when told (on the notice);
- ``0``: continuously, so a stop never loses work (the model of round-based schedulers,
  where a job saves at the end of every round);
- ``> 0``: every that many seconds of running.

``cost_s`` is how long writing one checkpoint takes (seconds in which the job makes no
progress): the simulator charges it; real drivers learn it from the job's own timing.

A :class:`SavedCheckpoint` is what a task reported: when, and optionally the step it had
reached and where it wrote the state. The core keeps the last one per job and hands it to
drivers in every Bind that resumes from it; ``step`` and ``path`` are the task's own words,
which the core never interprets.
"""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass

__all__ = [
    "DEFAULT_NOTICE_S",
    "DEFAULT_SIGNAL",
    "MAX_NOTICE_S",
    "NOTICE_SIGNALS",
    "Checkpointing",
    "SavedCheckpoint",
    "signal_name",
]

#: the signal a notice sends when the job names none
DEFAULT_SIGNAL = "SIGUSR1"
#: how long a checkpointable job has to save when it names no notice
DEFAULT_NOTICE_S = 30.0
#: a notice longer than this holds capacity a preemptor waits for: refused
MAX_NOTICE_S = 3600.0
#: the signals a notice may send: catchable ones whose default action is to end the
#: process (so a task that ignores the notice still sees it), and that the task wrapper
#: traps (it must survive the notice to record the exit status)
NOTICE_SIGNALS = frozenset(
    {"SIGUSR1", "SIGUSR2", "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGALRM"}
)


def signal_name(value: str | int) -> str:
    """The canonical name (``SIGUSR1``) of a signal given as ``SIGUSR1``, ``usr1`` or
    ``10``; ValueError for an unknown signal, or one that is not a notice signal
    (:data:`NOTICE_SIGNALS`)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a signal name such as SIGUSR1, got {value!r}")
    text = str(value).strip()
    try:
        if text.isdigit():
            name = signal.Signals(int(text)).name
        else:
            upper = text.upper()
            name = signal.Signals[upper if upper.startswith("SIG") else "SIG" + upper].name
    except (KeyError, ValueError):
        raise ValueError(f"unknown signal {value!r} (expected e.g. SIGUSR1, SIGUSR2)") from None
    if name in ("SIGKILL", "SIGSTOP"):
        raise ValueError(f"{name} cannot be caught, so a task could not save on it")
    if name not in NOTICE_SIGNALS:
        allowed = ", ".join(sorted(NOTICE_SIGNALS))
        raise ValueError(f"{name} is not a notice signal (one of {allowed})")
    return name


@dataclass(frozen=True, slots=True)
class Checkpointing:
    """How a job saves its state (see the module docstring). Times in seconds."""

    interval_s: float | None = None
    notice_s: float = DEFAULT_NOTICE_S
    signal: str = DEFAULT_SIGNAL
    cost_s: float = 0.0

    def __post_init__(self) -> None:
        if self.interval_s is not None and not (
            math.isfinite(self.interval_s) and self.interval_s >= 0
        ):
            raise ValueError(f"interval_s must be finite and >= 0, got {self.interval_s}")
        if not (math.isfinite(self.notice_s) and 0 <= self.notice_s <= MAX_NOTICE_S):
            raise ValueError(f"notice_s must be 0..{MAX_NOTICE_S:g}, got {self.notice_s}")
        if not (math.isfinite(self.cost_s) and self.cost_s >= 0):
            raise ValueError(f"cost_s must be finite and >= 0, got {self.cost_s}")
        object.__setattr__(self, "signal", signal_name(self.signal))

    @property
    def continuous(self) -> bool:
        """It never loses work when stopped (``interval_s`` 0)."""
        return self.interval_s == 0

    def to_dict(self) -> dict[str, float | str | None]:
        return {
            "interval_s": self.interval_s,
            "notice_s": self.notice_s,
            "signal": self.signal,
            "cost_s": self.cost_s,
        }


@dataclass(frozen=True, slots=True)
class SavedCheckpoint:
    """A checkpoint a task of run ``run`` reported at ``time`` (the driver's clock).

    ``step`` and ``path`` are what the task said (None and "" when it said nothing);
    ``progress`` is the work it had done, where the driver knows it (the simulator).
    """

    time: float
    run: int
    step: int | None = None
    path: str = ""
    progress: float | None = None

    def describe(self) -> str:
        """``t=120 (step 400)``: for explanations and histories."""
        text = "t=" + f"{self.time:.3f}".rstrip("0").rstrip(".")
        if self.step is not None:
            text += f" (step {self.step})"
        return text
