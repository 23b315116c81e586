"""Dependencies and arrays in the control plane: what the API resolves at submission, and
what the loop tells the core from the store before it hands it jobs that wait or arrays.

At submission, each ``after`` entry is resolved to a job id, once (the stored spec keeps
the ids, so a restart never resolves a name again): a name of one job of the same
submission first, then a job id the caller may see, then the caller's most recent job of
that name. A dependency that has already ended otherwise than it needs is refused: the job
could never start.

The core learns the ends of the jobs a submission waits for from its own records; a job
that ended before the control plane last started is only in the store, and
:func:`tell_core` hands its end over (``Scheduler.known_end``), with, for an array
submitted again by recovery, what became of its created elements
(``Scheduler.known_elements``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hetsched.controlplane.schemas import SubmitSpec
from hetsched.controlplane.storage.store import Store
from hetsched.model.job import Job
from hetsched.model.lifecycle import TERMINAL, JobState
from hetsched.model.workflow import Needs, parse_array, split_element
from hetsched.scheduler import Event, JobSubmitted, Scheduler

__all__ = ["Unresolved", "array_view", "resolve_after", "tell_core", "uncreated_element"]


class Unresolved(ValueError):
    """Dependencies that name no job, or can never be met: one line each."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def resolve_after(
    store: Store,
    owners: Sequence[str],
    admin: bool,
    specs: Sequence[SubmitSpec],
    ids: Sequence[str],
) -> list[list[dict[str, Any]]]:
    """Each job's ``after`` as ``[{job: ID, state: ...}]``; Unresolved naming each entry
    that cannot be (``jobs[2].after[0]: ...`` in a batch, ``after[0]: ...`` alone)."""
    names: dict[str, list[str]] = {}
    for spec, job_id in zip(specs, ids, strict=True):
        names.setdefault(spec.name, []).append(job_id)
    errors: list[str] = []
    out: list[list[dict[str, Any]]] = []
    for i, (spec, owner) in enumerate(zip(specs, owners, strict=True)):
        resolved: list[dict[str, Any]] = []
        for k, dep in enumerate(spec.after):
            where = f"jobs[{i}].after[{k}]" if len(specs) > 1 else f"after[{k}]"
            try:
                target = _target(store, owner, admin, dep.job, names)
                _can_be_met(store, target, dep.job, dep.state)
            except ValueError as exc:
                errors.append(f"{where}: {exc}")
                continue
            resolved.append({"job": target, "state": dep.state.value})
        out.append(resolved)
    if errors:
        raise Unresolved(errors)
    return out


def _target(store: Store, owner: str, admin: bool, ref: str, names: dict[str, list[str]]) -> str:
    in_batch = names.get(ref)
    if in_batch is not None:
        if len(in_batch) > 1:
            raise ValueError(f"{len(in_batch)} jobs of this submission are named {ref!r}")
        return in_batch[0]
    row = store.job(ref)
    element = split_element(ref)
    array = None
    if row is None and element is not None:
        parent = store.job(element[0])
        array = None if parent is None else parent["spec"].get("array")
        if array is not None:
            row = parent  # an element not created yet: its array says whose it is
    if row is not None and (admin or row["owner"] == owner):
        if array is not None and element is not None and element[1] not in parse_array(array):
            raise ValueError(f"{ref!r}: the array has no index {element[1]} ({array})")
        return ref
    named = store.latest_named(owner, ref)
    if named is None:
        raise ValueError(f"no job named {ref!r} in this submission or among {owner}'s jobs")
    return str(named["id"])


def _can_be_met(store: Store, job_id: str, ref: str, needs: Needs) -> None:
    row = store.job(job_id)
    element = split_element(job_id) if row is None else None
    if element is not None:  # not created: cancelled if its array has ended (never will be)
        parent = store.job(element[0])
        ended = parent is not None and parent["state"] in {s.value for s in TERMINAL}
        row = {"state": JobState.CANCELLED.value} if ended else None
    if row is None or row["state"] not in {s.value for s in TERMINAL}:
        return
    state = JobState(row["state"])
    if not needs.met_by(state):
        shown = ref if ref == job_id else f"{ref} ({job_id})"
        raise ValueError(f"{shown} {state}, it needs {needs}: it could never start")


def tell_core(store: Store, core: Scheduler, events: Sequence[Event]) -> None:
    """Before the core takes ``events``: the ends of jobs the submitted jobs wait for that
    the core has no record of, and the created elements of arrays it has no record of
    (submitted again after a restart)."""
    jobs: list[Job] = [
        e.job for e in events if isinstance(e, JobSubmitted) and (e.job.after or e.job.array)
    ]
    if not jobs:
        return
    workflow = core.workflow
    unknown = sorted(
        {
            d.job
            for job in jobs
            for d in job.after
            if d.job not in core.jobs and d.job not in workflow.outcomes
        }
    )
    states = store.job_states(unknown)
    # an element without a row, of an array the core has no record of: the array's end
    # says it was never created (the core's Workflows.state_of)
    parents = {p[0] for i in unknown if i not in states and (p := split_element(i))}
    parents -= core.jobs.keys() | workflow.outcomes.keys()
    for job_id, (state, name) in (states | store.job_states(sorted(parents))).items():
        if state in {s.value for s in TERMINAL}:
            core.known_end(job_id, JobState(state), name)
    for job in jobs:
        if job.array is None or job.id in core.jobs:
            continue
        elements = store.element_states(job.id)
        if elements:
            ended = {i: JobState(s) for i, s in elements.items() if JobState(s) in TERMINAL}
            live = [i for i in elements if i not in ended]
            core.known_elements(job.id, ended, live)


def array_view(store: Store, row: dict[str, Any]) -> dict[str, Any]:
    """An array's elements: its size, counts by state (``waiting to be created`` for those
    not created yet) and the indexes of those that did not succeed."""
    spec = parse_array(row["spec"]["array"])
    counts = store.element_counts(row["id"])
    created = sum(counts.values())
    if created < len(spec):
        counts["not created yet"] = len(spec) - created
    return {
        "size": len(spec),
        "cap": spec.cap,
        "counts": counts,
        "unsuccessful": store.unsuccessful_elements(row["id"]),
    }


def uncreated_element(store: Store, job_id: str) -> bool:
    """Whether ``job_id`` names an element of a live array (``ID[7]``) without a row."""
    split = split_element(job_id)
    if split is None:
        return False
    parent = store.job(split[0])
    if parent is None or parent["state"] in {s.value for s in TERMINAL}:
        return False
    text = parent["spec"].get("array")
    return text is not None and split[1] in parse_array(text)
