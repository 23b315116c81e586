"""What dependencies and arrays keep in the store, on SQLite and on PostgreSQL: an element's
row copies its array's when the core creates it (once), a cancel of an element not created
yet writes its row, counts by state, the latest job of a name, the 0005 downgrade."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, text

from builders import cpu_node, gpu_node, job
from hetsched.agent import wrapper
from hetsched.agent.executor import Executor
from hetsched.cluster import ClusterState
from hetsched.controlplane.recovery import recover
from hetsched.controlplane.storage.store import NewJob, Store
from hetsched.controlplane.storage.workflowstore import record_elements
from hetsched.controlplane.workflows import tell_core
from hetsched.drivers.order import in_order
from hetsched.model.lifecycle import JobState
from hetsched.model.workflow import Dependency, Needs
from hetsched.scheduler import (
    Bind,
    Change,
    JobSubmitted,
    JobTransition,
    Scheduler,
    TaskFinished,
)


def _submitted(job_id: str, at: float) -> JobTransition:
    return JobTransition(
        job_id, at, None, JobState.PENDING, Change.SUBMITTED, "submitted", 0, 0, at
    )


def test_elements_copy_their_array_once(store: Store) -> None:
    spec = {"name": "sweep", "command": ["true"], "array": "0-9%2"}
    store.insert_jobs([NewJob("j1", "alice", "default", "sweep", 3, spec)], None, None, 1.0)
    store.insert_jobs(
        [NewJob("j2", "alice", "default", "sweep", 0, {"name": "sweep"})], None, None, 2.0
    )
    with store.write() as conn:
        record_elements(conn, [_submitted("j1[0]", 5.0), _submitted("j1[1]", 5.0)])
    with store.write() as conn:  # submitted again after a restart: not a second row
        record_elements(conn, [_submitted("j1[1]", 6.0)])
    row = store.job("j1[1]")
    assert row is not None
    assert (row["name"], row["owner"], row["priority"], row["spec"]) == (
        "sweep[1]",
        "alice",
        3,
        spec,
    )
    assert (row["array_of"], row["array_index"], row["submitted_at"], row["state"]) == (
        "j1", 1, 5.0, "pending",
    )  # fmt: skip
    assert [t["cause"] for t in store.job_transitions("j1[1]")] == ["created: its array may run it"]
    assert store.request_element_cancel("j1", 7, 8.0)
    assert store.job("j1[7]")["cancel_requested"]  # type: ignore[index]
    assert store.element_states("j1") == {0: "pending", 1: "pending", 7: "pending"}
    assert store.element_counts("j1") == {"pending": 3}
    with store.write() as conn:
        conn.execute(text("UPDATE jobs SET state = 'failed' WHERE id = 'j1[7]'"))
    assert store.unsuccessful_elements("j1") == [7]
    assert not store.request_element_cancel("j1", 7, 9.0)  # it has ended
    # the array, not its element, nor the older job of that name
    assert store.latest_named("alice", "sweep")["id"] == "j2"  # type: ignore[index]
    assert store.latest_named("bob", "sweep") is None
    assert store.job_states(["j1[7]", "nope"]) == {"j1[7]": ("failed", "sweep[7]")}


def test_the_0005_migration_goes_down_and_keeps_the_count_triggers(tmp_path: Path) -> None:
    db = Store(f"sqlite:///{tmp_path / 'down.db'}")
    db.migrate()
    config = Config()
    location = resources.files("hetsched.controlplane.storage") / "migrations"
    config.set_main_option("script_location", str(location))
    with db.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0004")
    columns = {c["name"] for c in inspect(db.engine).get_columns("jobs")}
    assert {"array_of", "array_index"}.isdisjoint(columns) and "migrations" in columns
    with db.engine.connect() as conn:
        query = text("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
        triggers = [r[0] for r in conn.execute(query)]
    assert triggers and all(t.startswith("job_counts_") for t in triggers)
    db.migrate()  # and up again
    assert "array_of" in {c["name"] for c in inspect(db.engine).get_columns("jobs")}
    db.close()


def test_a_restart_tells_the_core_an_ended_arrays_uncreated_element_never_will_be(
    store: Store,
) -> None:
    spec = {"name": "sweep", "command": ["true"], "array": "0-9%1"}
    store.insert_jobs([NewJob("j1", "alice", "default", "sweep", 0, spec)], None, None, 1.0)
    with store.write() as conn:  # cancelled before the restart, j1[5] never created
        conn.execute(text("UPDATE jobs SET state = 'cancelled' WHERE id = 'j1'"))
    core = Scheduler(ClusterState([gpu_node("g", gpus=1)]))  # the restarted core
    waits = [
        JobSubmitted(job("ended", after=(Dependency("j1[5]", Needs.ENDED),))),
        JobSubmitted(job("needs", after=(Dependency("j1[5]"),))),
    ]
    tell_core(store, core, waits)
    actions = core.handle(waits, 2.0)
    assert [a.job_id for a in actions if isinstance(a, Bind)] == ["ended"]
    assert core.record("needs").state is JobState.CANCELLED
    assert core.record("needs").history[-1].cause == "sweep[5] cancelled"


def test_a_cancel_asked_for_before_a_crash_ends_a_waiting_job_and_an_uncreated_element(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancels answered, then a crash before the loop's next turn: recovery ends the waiting
    job and the element in the store instead of submitting them again (a cancel in the
    same batch as the submission would come first and find no job)."""
    monkeypatch.setattr(wrapper, "EXIT_JOURNAL", tmp_path / "shm")
    (tmp_path / "shm").mkdir()
    body = {"name": "j", "command": ["true"], "resources": {"cpu": "1"}}
    jobs = [NewJob(i, "alice", "default", i, 0, body) for i in ("j1", "j2")]
    jobs.append(NewJob("a", "alice", "default", "sweep", 0, {**body, "array": "0-3%1"}))
    store.insert_jobs(jobs, None, None, 1.0)
    assert store.request_cancel("j1") and store.request_element_cancel("a", 2, 2.0)
    core = Scheduler(ClusterState([cpu_node("n1")]))
    found = recover(store, core, Executor(tmp_path / "home", "inst"), now=10.0)
    events = in_order(found.events)
    assert [e.job.id for e in events if isinstance(e, JobSubmitted)] == ["j2", "a"]
    for job_id in ("j1", "a[2]"):
        row = store.job(job_id)
        assert row is not None
        assert (row["state"], row["reason"]) == ("cancelled", "cancelled (asked before a restart)")
    tell_core(store, core, events)
    actions = core.handle(events, 10.0)
    assert [a.job_id for a in actions if isinstance(a, Bind)] == ["j2", "a[0]"]
    for now, element in enumerate(("a[0]", "a[1]", "a[3]"), start=11):
        core.handle([TaskFinished(element, 0, core.record(element).run)], float(now))
    assert core.record("a").state is JobState.FAILED  # a[2] never ran
    assert core.record("a").history[-1].cause == "1 of 4 elements did not succeed: 2"
