"""One thread per member: it renews the federation's lease there and carries out what the
loop asks (send a job, stop a job), telling the loop what happened through messages.

The worker is the only one that talks to its member (besides log reads), so the lease
bounds (:class:`~hetsched.federation.lease.LeaseBounds`) are its own; each message carries
a copy of them. A request that gets no answer is retried: a job is sent with the same
idempotency key every time, so the member starts it at most once; a stop is sent until
the member says the job ended. Operations of an earlier incarnation of the member (before
the federation fenced it) are dropped, never sent.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hetsched.federation.lease import LeaseBounds
from hetsched.federation.member import Member, MemberError, Refused, Report, Unreachable
from hetsched.keys import TaskKey

__all__ = [
    "Answered",
    "Ask",
    "Cancel",
    "Gone",
    "Heard",
    "Message",
    "Send",
    "Silent",
    "Submitted",
    "Worker",
    "WorkerRefused",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Send:
    """Send a job (its submission body) for the federation's task ``key``."""

    key: TaskKey
    incarnation: int
    idempotency: str
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stop the member's job ``job_id``."""

    job_id: str
    incarnation: int


@dataclass(frozen=True, slots=True)
class Ask:
    """Ask the member's own what-if for these jobs (shape -> submission body)."""

    bodies: Mapping[str, Mapping[str, Any]]
    incarnation: int


# -- messages to the loop -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Heard:
    """A renewal answered: the report, and the bounds after it."""

    member: str
    report: Report
    bounds: LeaseBounds


@dataclass(frozen=True, slots=True)
class Silent:
    """A renewal got no answer; the bounds after sending it."""

    member: str
    bounds: LeaseBounds
    why: str


@dataclass(frozen=True, slots=True)
class Submitted:
    member: str
    key: TaskKey
    incarnation: int
    job_id: str


@dataclass(frozen=True, slots=True)
class WorkerRefused:
    member: str
    key: TaskKey
    incarnation: int
    reason: str


@dataclass(frozen=True, slots=True)
class Answered:
    """The member's what-if answers, by job shape."""

    member: str
    answers: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Gone:
    """The member does not know a job it was asked to stop: nothing of it runs there."""

    member: str
    job_id: str


Message = Heard | Silent | Submitted | WorkerRefused | Gone | Answered


class Worker:
    """Renews the lease at ``member`` every ``period_s`` and carries out operations."""

    def __init__(
        self,
        member: Member,
        federation: str,
        bounds: LeaseBounds,
        period_s: float,
        tell: Callable[[Message], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.member = member
        self.federation = federation
        self.bounds = bounds
        self.period_s = period_s
        self.tell = tell
        self.clock = clock
        #: the member's jobs to report on, set by the loop
        self.watch: frozenset[str] = frozenset()
        #: operations of incarnations before this one are dropped
        self.incarnation = 0
        self._ops: queue.SimpleQueue[Send | Cancel | Ask] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def submit(self, op: Send | Cancel | Ask) -> None:
        self._ops.put(op)
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"member-{self.member.name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.member.close()

    def _run(self) -> None:
        renew_at = 0.0
        while not self._stop.is_set():
            if self.clock() >= renew_at:
                renew_at = self.clock() + self.period_s
                self._renew()
            self._operate()
            self._wake.wait(timeout=max(0.0, min(renew_at - self.clock(), self.period_s)))
            self._wake.clear()

    def _ask(self, op: Ask) -> None:
        """A what-if is advice: an error or no answer is dropped, never retried."""
        keys = list(op.bodies)
        try:
            answers = self.member.what_if([op.bodies[k] for k in keys])
        except Exception as exc:
            log.info("member %s: no what-if answer: %s", self.member.name, exc)
            return
        if answers is not None and len(answers) == len(keys):
            self.tell(Answered(self.member.name, dict(zip(keys, answers, strict=True))))

    def _renew(self) -> None:
        nonce = self.bounds.sending(self.clock())
        try:
            report = self.member.renew(
                self.federation, self.bounds.lease_s, nonce, sorted(self.watch)
            )
        except MemberError as exc:
            self.tell(Silent(self.member.name, dataclasses.replace(self.bounds), str(exc)))
            return
        except Exception as exc:  # a bug in a member client must not end the worker
            log.exception("member %s: renewal failed", self.member.name)
            self.tell(Silent(self.member.name, dataclasses.replace(self.bounds), repr(exc)))
            return
        self.bounds.answered(report, self.clock())
        self.tell(Heard(self.member.name, report, dataclasses.replace(self.bounds)))

    def _operate(self) -> None:
        """Carry out the queued operations in order; on the first one that gets no answer,
        keep it and the rest for the next round."""
        later: list[Send | Cancel | Ask] = []
        while True:
            try:
                op = self._ops.get_nowait()
            except queue.Empty:
                break
            if later or op.incarnation < self.incarnation:
                if op.incarnation >= self.incarnation:
                    later.append(op)
                continue
            if not self._one(op):
                later.append(op)
        for op in later:
            self._ops.put(op)

    def _one(self, op: Send | Cancel | Ask) -> bool:
        """True when done (or refused for good), False to try again later."""
        name = self.member.name
        if isinstance(op, Ask):
            self._ask(op)
            return True
        try:
            if isinstance(op, Send):
                job_id = self.member.submit(op.idempotency, op.body)
                self.tell(Submitted(name, op.key, op.incarnation, job_id))
            else:
                self.member.cancel(op.job_id)
        except Unreachable:
            return False
        except Refused as exc:
            if isinstance(op, Send):
                self.tell(WorkerRefused(name, op.key, op.incarnation, exc.message))
            elif exc.status == 404:
                self.tell(Gone(name, op.job_id))
            else:
                log.warning("member %s refused to stop job %s: %s", name, op.job_id, exc)
        except Exception as exc:
            log.exception("member %s: an operation failed", name)
            if isinstance(op, Send):
                self.tell(WorkerRefused(name, op.key, op.incarnation, repr(exc)))
        return True
