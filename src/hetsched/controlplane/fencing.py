"""The member side of a federation's fencing protocol: leases renewed by nonce, and lapses.

A federation (``hetsched federation up``) that sends jobs to this service must keep a lease
alive here; when the lease lapses, every job it sent is stopped and none of them starts
again. This is what lets the federation run a job elsewhere without ever running it twice
at once (docs/federation.md has the whole protocol and its guarantees).

- **Nonces.** Every answer to a renewal (``POST /v1/federation/lease``) carries a fresh
  nonce, noted with the time it was issued here. A renewal names a nonce it was given; the
  lease then runs until *that nonce's issue time + lease_s*. A nonce is issued before the
  federation receives it, so the federation holds a bound on this member's expiry that no
  delay on the wire can extend: when it received the nonce, plus ``lease_s`` (on its clock;
  clock rates are assumed equal and the federation adds a margin). Nonces issued before a
  lapse never renew.
- **Lease file.** ``<home>/fencing/<federation>.lease``: its first line is the expiry in
  whole seconds of wall-clock time (rounded down), its second the lapse record (JSON). Each
  task of a federated job runs under a wrapper that reads the first line: it never starts
  the command at or after the expiry, and kills its process group once ``expiry +
  backstop_s`` has passed, so tasks stop even when this service is dead or hung; the
  backstop leaves the control plane time for its own SIGTERM and grace first. A write that
  a crash loses only leaves an earlier expiry: the safe direction.
- **Lapse.** When the expiry passes (the reconcile loop looks every turn; a start looks at
  the file), the lapse is recorded, every live job of that federation is cancelled, and no
  new job of it is accepted. Renewals are refused while any of its jobs is live, so a
  federation told "lapsed" knows its jobs here are stopped once they are reported ended.
  A job that lived across a lapse is reported ``fenced``.

Thread-safe: the API renews and the loop checks from their own threads.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FEDERATION_NAME", "Fencing", "Renewal"]

#: what a federation's name may be (it names a file)
FEDERATION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
#: nonces kept per federation (a renewal names one of the last few answers)
_NONCES = 64
#: lapse times kept per federation (to tell which jobs lived across one)
_LAPSES = 256
#: the wrapper's watchdog looks once a second at whole seconds: what that adds at most
_WATCHDOG_SLACK_S = 3.0


@dataclass(frozen=True, slots=True)
class Renewal:
    """The answer to one renewal."""

    federation: str
    #: the nonce to name in the next renewal
    nonce: str
    #: the named nonce renewed the lease
    renewed: bool
    #: the lease is live now (after this renewal)
    live: bool
    #: seconds left on the lease here (0 when not live)
    expires_in_s: float
    #: the lease lapsed and its jobs are not all ended yet: nothing is renewed meanwhile
    lapsed: bool
    #: how many times the lease has lapsed here
    lapses: int
    #: live jobs of the federation (while lapsed: those still being stopped)
    live_jobs: int
    #: the longest a federated task may outlive the lease's expiry here
    fence_after_s: float
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "federation": self.federation,
            "nonce": self.nonce,
            "renewed": self.renewed,
            "live": self.live,
            "expires_in_s": self.expires_in_s,
            "lapsed": self.lapsed,
            "lapses": self.lapses,
            "live_jobs": self.live_jobs,
            "fence_after_s": self.fence_after_s,
            "why": self.why,
        }


@dataclass(slots=True)
class _Lease:
    lease_s: float
    #: expiry on the monotonic clock (0: none yet), and on the wall clock
    expires: float = 0.0
    expires_wall: float = 0.0
    #: nonce -> (monotonic, wall) time it was issued
    nonces: OrderedDict[str, tuple[float, float]] = field(default_factory=OrderedDict)
    #: wall-clock times of the lapses, oldest first
    lapses: list[float] = field(default_factory=list)
    #: lapsed and not renewed since
    lapsed: bool = False


class Fencing:
    """The leases of every federation this member serves (see the module docstring).

    ``backstop_s`` is how long after the expiry a task's own watchdog kills it (the
    service's kill grace plus a margin: its own cancellation comes first).
    """

    def __init__(
        self,
        home: Path,
        backstop_s: int,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.directory = home / "fencing"
        self.backstop_s = int(backstop_s)
        self.clock = clock
        self.wall = wall
        self._leases: dict[str, _Lease] = {}
        self._lock = threading.Lock()
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._load()

    @property
    def fence_after_s(self) -> float:
        """The longest a federated task may outlive its lease's expiry here."""
        return self.backstop_s + _WATCHDOG_SLACK_S

    def lease_file(self, federation: str) -> Path:
        _check_name(federation)
        return self.directory / f"{federation}.lease"

    # -- what the API asks ---------------------------------------------------------------

    def renew(self, federation: str, lease_s: float, nonce: str | None, live_jobs: int) -> Renewal:
        """Renew ``federation``'s lease to the issue time of ``nonce`` + ``lease_s`` (when
        the nonce is one this member issued, and the lease is not lapsed with jobs still
        live), and issue the next nonce. ``live_jobs``: the federation's jobs here that
        have not ended."""
        _check_name(federation)
        if not (math.isfinite(lease_s) and lease_s > 0):
            raise ValueError(f"lease_s must be a positive number of seconds, got {lease_s}")
        with self._lock:
            now, wall = self.clock(), self.wall()
            lease = self._leases.get(federation)
            if lease is None:
                lease = self._leases[federation] = _Lease(lease_s)
            self._check_lapse(federation, lease, now)
            renewed, why = self._apply(lease, lease_s, nonce, live_jobs, now)
            if renewed:
                self._write(federation, lease)
            issued = secrets.token_hex(12)
            lease.nonces[issued] = (now, wall)
            while len(lease.nonces) > _NONCES:
                lease.nonces.popitem(last=False)
            live = lease.expires > now and not lease.lapsed
            return Renewal(
                federation,
                issued,
                renewed,
                live,
                max(0.0, lease.expires - now) if live else 0.0,
                lease.lapsed,
                len(lease.lapses),
                live_jobs,
                self.fence_after_s,
                why,
            )

    def _apply(
        self, lease: _Lease, lease_s: float, nonce: str | None, live_jobs: int, now: float
    ) -> tuple[bool, str]:
        if nonce is None:
            return False, "no nonce named: send the one in this answer"
        issued = lease.nonces.get(nonce)
        if issued is None:
            return False, "unknown nonce (issued before a restart or a lapse): send this one"
        if lease.lapsed and live_jobs:
            return False, f"lapsed: {live_jobs} job(s) of the old lease are still being stopped"
        mono, wall = issued
        if mono + lease_s <= now:
            return False, "the nonce is older than the lease: send this one"
        lease.lease_s = lease_s
        if mono + lease_s > lease.expires:
            lease.expires = mono + lease_s
            lease.expires_wall = wall + lease_s
        lease.lapsed = False
        return True, "renewed"

    def live(self, federation: str) -> bool:
        """The federation holds a live lease here: its jobs may be accepted and started."""
        with self._lock:
            lease = self._leases.get(federation)
            if lease is None:
                return False
            now = self.clock()
            self._check_lapse(federation, lease, now)
            return lease.expires > now and not lease.lapsed

    def lapsed(self) -> dict[str, float]:
        """Federations whose lease has lapsed (and not been renewed since): name -> lease
        seconds. The loop cancels their live jobs."""
        with self._lock:
            now = self.clock()
            out: dict[str, float] = {}
            for name, lease in self._leases.items():
                self._check_lapse(name, lease, now)
                if lease.lapsed:
                    out[name] = lease.lease_s
            return out

    def next_lapse_s(self) -> float | None:
        """Seconds until the earliest live lease expires (the loop wakes then to cancel its
        jobs), or None when no lease is live."""
        with self._lock:
            now = self.clock()
            left = [
                lease.expires - now
                for lease in self._leases.values()
                if not lease.lapsed and lease.expires > 0.0
            ]
            return max(0.0, min(left)) if left else None

    def last_lapse(self, federation: str) -> tuple[int, float] | None:
        """The lapse ``federation``'s lease is in: its number here (1 for the first: the
        lease's epoch) and the wall-clock time it ran out; None while it is live."""
        with self._lock:
            lease = self._leases.get(federation)
            if lease is None:
                return None
            self._check_lapse(federation, lease, self.clock())
            if not lease.lapsed or not lease.lapses:
                return None
            return len(lease.lapses), lease.lapses[-1]

    def fenced(self, federation: str, submitted_at: float, ended_at: float | None) -> bool:
        """Whether a job of ``federation`` submitted at ``submitted_at`` (wall clock) and
        ended at ``ended_at`` (None: live) lived across a lapse of its lease."""
        with self._lock:
            lease = self._leases.get(federation)
            if lease is None:
                return False
            end = math.inf if ended_at is None else ended_at
            return any(submitted_at < t <= end for t in lease.lapses)

    # -- the lapse, and the file ---------------------------------------------------------

    def _check_lapse(self, federation: str, lease: _Lease, now: float) -> None:
        """Record a lapse when a lease that was live has passed its expiry."""
        if lease.lapsed or lease.expires == 0.0 or lease.expires > now:
            return
        lease.lapsed = True
        lease.lapses.append(lease.expires_wall)
        del lease.lapses[:-_LAPSES]
        # nonces issued while it was live must never renew it again
        lease.nonces.clear()
        self._write(federation, lease)

    def _write(self, federation: str, lease: _Lease) -> None:
        record = {"lease_s": lease.lease_s, "lapses": lease.lapses, "lapsed": lease.lapsed}
        text = f"{math.floor(lease.expires_wall)}\n{json.dumps(record)}\n"
        path = self.lease_file(federation)
        temporary = path.with_name(path.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(temporary, path)

    def _load(self) -> None:
        """Leases from the files of an earlier start; one past its expiry has lapsed."""
        now, wall = self.clock(), self.wall()
        for path in sorted(self.directory.glob("*.lease")):
            name = path.name.removesuffix(".lease")
            if not FEDERATION_NAME.match(name):
                continue
            try:
                first, second = path.read_text().splitlines()[:2]
                expires_wall = float(first)
                record = json.loads(second)
                lease = _Lease(
                    float(record["lease_s"]),
                    now + (expires_wall - wall),
                    expires_wall,
                    lapses=[float(t) for t in record.get("lapses", [])],
                    lapsed=bool(record.get("lapsed", False)),
                )
            except (OSError, ValueError, KeyError, TypeError):
                continue  # unreadable: no lease, so nothing of it may start
            if expires_wall <= 0:
                lease.expires = 0.0
            self._leases[name] = lease
            self._check_lapse(name, lease, now)


def _check_name(federation: str) -> None:
    if not FEDERATION_NAME.match(federation):
        raise ValueError(
            f"federation name {federation!r}: 1-63 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
