"""The member side of a federation's fencing protocol on Kubernetes: the nonce lease of
``hetsched up`` (``service/fencing.py``), carried by a ``coordination.k8s.io/v1`` Lease.

The federation sends a job as pods labelled ``hetsched.io/federation: NAME`` for the
hetsched scheduler; the scheduler runs them only while the federation's lease is live, and
deletes them all when it lapses. The lease is the object ``hetsched-federation-NAME`` in
the scheduler's namespace:

- ``metadata.annotations["hetsched.io/nonce"]``: written by the scheduler, a fresh nonce
  whose issue time (on its monotonic clock, taken *before* the write) it keeps;
- ``metadata.annotations["hetsched.io/renew"]``: written by the federation, the nonce it
  renews, with ``spec.leaseDurationSeconds``. The lease then runs until that nonce's issue
  time + the duration; the federation read the nonce after it was issued, so its own bound
  (when it read the nonce + the duration) holds whatever the delays;
- the scheduler answers each applied renewal with the next nonce, and writes
  ``hetsched.io/expires`` (wall-clock seconds: what a restarted scheduler resumes from),
  ``hetsched.io/lapses`` and ``hetsched.io/fence-after`` (how long after the expiry its
  pods may still run: the deletion grace plus a step).

When the expiry passes, the lease has lapsed: the scheduler deletes every pod of that
federation, schedules none of them, and applies no renewal while any is left. A restarted
scheduler reads ``hetsched.io/expires``: past it, the lease has lapsed.

Unlike ``hetsched up``, whose tasks kill themselves, pods depend on this scheduler to be
deleted: it must run (with leader election) for the fencing bound to hold.
"""

from __future__ import annotations

import copy
import logging
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hetsched.k8s.api import ApiError, ClusterAPI

log = logging.getLogger(__name__)

__all__ = [
    "ANNOTATIONS",
    "DELETE_GRACE_S",
    "FEDERATION_LABEL",
    "LeaseFencing",
    "federation_of",
    "lease_name",
]

#: the label that marks a pod as a task of a federation's job
FEDERATION_LABEL = "hetsched.io/federation"
#: annotations of the lease object, by role
ANNOTATIONS = {
    "nonce": "hetsched.io/nonce",
    "renew": "hetsched.io/renew",
    "renewed": "hetsched.io/renewed",
    "nonce_age": "hetsched.io/nonce-age",
    "expires": "hetsched.io/expires",
    "lapses": "hetsched.io/lapses",
    "lapsed": "hetsched.io/lapsed",
    "fence_after": "hetsched.io/fence-after",
}
#: seconds a fenced pod gets between SIGTERM and SIGKILL
DELETE_GRACE_S = 5
_NONCES = 16

Obj = dict[str, Any]


def lease_name(federation: str) -> str:
    return f"hetsched-federation-{federation}"


def federation_of(pod: Obj) -> str:
    """The federation a pod's job came from ("" for none)."""
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(FEDERATION_LABEL) or "")


@dataclass(slots=True)
class _State:
    #: expiry on the monotonic clock (0: never live), and the lease duration
    expires: float = 0.0
    lease_s: float = 0.0
    nonces: OrderedDict[str, float] = field(default_factory=OrderedDict)
    #: the last nonce a renewal named and we applied (written back for the federation)
    applied: str = ""
    lapses: int = 0
    lapsed: bool = False
    #: the expiry written on the object at the last start (resumed once)
    resumed: bool = False


class LeaseFencing:
    """The leases of the federations whose pods this scheduler runs (module docstring).

    ``federations``: the ones served (their leases are read from the start; a federation
    whose pods appear is served too). ``step_s``: how often the scheduler calls
    :meth:`sync` at most (part of how long a pod may outlive the expiry). Not thread-safe:
    the scheduler's loop calls it.
    """

    def __init__(
        self,
        namespace: str,
        federations: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        step_s: float = 1.0,
    ) -> None:
        self.namespace = namespace
        self.clock = clock
        self.wall = wall
        self.step_s = step_s
        self._states: dict[str, _State] = {name: _State() for name in federations}

    @property
    def fence_after_s(self) -> float:
        """How long after a lease's expiry its pods may still run here."""
        return DELETE_GRACE_S + 2 * self.step_s + 1.0

    def live(self, federation: str) -> bool:
        state = self._states.get(federation)
        return state is not None and not state.lapsed and state.expires > self.clock()

    def lapsed(self) -> set[str]:
        """Federations whose lease has lapsed and not been renewed since."""
        return {name for name, s in self._states.items() if s.lapsed}

    def step(
        self,
        api: ClusterAPI,
        pods: Iterable[Obj],
        post: Callable[[Obj, str, str, str], None],
    ) -> None:
        """One round of the scheduler: :meth:`sync` over the federations of ``pods``
        (their live pods counted), then delete every pod of a federation whose lease
        lapsed, posting a ``Fenced`` event on it."""
        by_federation: dict[str, list[Obj]] = {}
        for obj in pods:
            name = federation_of(obj)
            if name and (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                by_federation.setdefault(name, []).append(obj)
        counts = {name: len(found) for name, found in by_federation.items()}
        self.sync(api, by_federation, counts)
        for name in self.lapsed():
            for obj in by_federation.get(name, []):
                meta = obj.get("metadata") or {}
                if meta.get("deletionTimestamp"):
                    continue
                post(obj, "Warning", "Fenced", f"fenced: the lease of federation {name} lapsed")
                namespace = str(meta.get("namespace") or "default")
                try:
                    api.delete_pod(namespace, str(meta.get("name")), DELETE_GRACE_S)
                except ApiError as exc:
                    pod = meta.get("name")
                    log.warning("deleting fenced pod %s/%s failed: %s", namespace, pod, exc)

    def sync(
        self, api: ClusterAPI, federations: Iterable[str], live_pods: Mapping[str, int]
    ) -> None:
        """Read each federation's lease, apply a renewal that names one of our nonces (not
        while lapsed with pods left, counted in ``live_pods``), record lapses, and write
        the next nonce where the federation needs one."""
        for name in sorted(set(federations) | set(self._states)):
            try:
                lease = api.get_lease(self.namespace, lease_name(name))
            except ApiError:
                lease = None  # unreadable now: the lease only runs out meanwhile
            state = self._states.setdefault(name, _State())
            if lease is not None:
                self._read(state, lease, live_pods.get(name, 0))
            self._check_lapse(state)
            if lease is not None and self._needs_nonce(state, lease):
                self._issue(api, name, state, lease)

    # -- one lease -------------------------------------------------------------------------

    def _read(self, state: _State, lease: Obj, live_pods: int) -> None:
        notes = _annotations(lease)
        if not state.resumed:
            state.resumed = True
            self._resume(state, notes)
        duration = (lease.get("spec") or {}).get("leaseDurationSeconds")
        renew = notes.get(ANNOTATIONS["renew"])
        issued = state.nonces.get(renew) if renew else None
        if issued is None or not isinstance(duration, int | float) or duration <= 0:
            return
        if state.lapsed and live_pods:
            return  # its pods of the lapsed lease are still being deleted
        now = self.clock()
        if issued + duration <= now:
            return
        state.lease_s = float(duration)
        state.expires = max(state.expires, issued + duration)
        state.lapsed = False
        state.applied = renew or ""
        # a nonce renews once: the ones issued up to it are spent
        while state.nonces:
            nonce, _ = state.nonces.popitem(last=False)
            if nonce == renew:
                break

    def _resume(self, state: _State, notes: Mapping[str, str]) -> None:
        """A (re)started scheduler takes the expiry and lapse count it wrote before."""
        try:
            state.lapses = int(notes.get(ANNOTATIONS["lapses"], "0"))
            expires_wall = float(notes.get(ANNOTATIONS["expires"], "0"))
        except ValueError:
            return
        state.lapsed = notes.get(ANNOTATIONS["lapsed"]) == "true"
        if expires_wall > 0:
            state.expires = self.clock() + (expires_wall - self.wall())

    def _check_lapse(self, state: _State) -> None:
        if state.lapsed or state.expires == 0.0 or state.expires > self.clock():
            return
        state.lapsed = True
        state.lapses += 1
        state.nonces.clear()

    def _needs_nonce(self, state: _State, lease: Obj) -> bool:
        """A fresh nonce is written every step (so one is never older than ``nonce_age_s``
        when the federation reads it), and at once after a renewal or a lapse."""
        notes = _annotations(lease)
        current = notes.get(ANNOTATIONS["nonce"])
        written_lapse = notes.get(ANNOTATIONS["lapsed"]) == "true"
        issued = state.nonces.get(current) if current is not None else None
        return (
            issued is None
            or self.clock() - issued >= self.step_s
            or notes.get(ANNOTATIONS["renew"]) == current
            or written_lapse != state.lapsed
        )

    @property
    def nonce_age_s(self) -> float:
        """How old a nonce may be when the federation reads it: a step, and one more for
        a step that came late."""
        return 2 * self.step_s

    def _issue(self, api: ClusterAPI, name: str, state: _State, lease: Obj) -> None:
        nonce = secrets.token_hex(12)
        issued = self.clock()  # before the write: the federation reads it later
        remaining = state.expires - issued
        expires_wall = self.wall() + remaining if state.expires and not state.lapsed else 0.0
        body = copy.deepcopy(lease)
        notes = body.setdefault("metadata", {}).setdefault("annotations", {})
        notes[ANNOTATIONS["nonce"]] = nonce
        notes[ANNOTATIONS["expires"]] = f"{math.floor(max(0.0, expires_wall))}"
        notes[ANNOTATIONS["lapses"]] = str(state.lapses)
        notes[ANNOTATIONS["lapsed"]] = "true" if state.lapsed else "false"
        notes[ANNOTATIONS["fence_after"]] = f"{self.fence_after_s:g}"
        notes[ANNOTATIONS["renewed"]] = state.applied
        notes[ANNOTATIONS["nonce_age"]] = f"{self.nonce_age_s:g}"
        try:
            written = api.replace_lease(self.namespace, lease_name(name), body)
        except ApiError:
            written = None
        if written is not None:
            state.nonces[nonce] = issued
            while len(state.nonces) > _NONCES:
                state.nonces.popitem(last=False)


def _annotations(lease: Obj) -> dict[str, str]:
    notes = (lease.get("metadata") or {}).get("annotations") or {}
    return {str(k): str(v) for k, v in notes.items()}
