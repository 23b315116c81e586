"""Which of the loop's commits wait for the disk (SQLite ``synchronous``), on a real file.

A turn that only starts tasks on this machine is committed with ``synchronous=NORMAL``
(written to the WAL, not flushed: it survives the service's crash, a power loss that undoes
it also ends its tasks); every other turn, and every write on a store opened NORMAL, keeps
the store's own level."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Connection, text

from hetsched.cluster.placement import Placement
from hetsched.controlplane.launcher import Launched
from hetsched.controlplane.planner import TurnPlan
from hetsched.controlplane.storage.store import Store
from hetsched.drivers import Exit, Start, Stop
from hetsched.keys import TaskKey
from hetsched.model.lifecycle import JobState
from hetsched.scheduler import Change, JobTransition, TaskCheckpointed

FULL, NORMAL = 2, 1
KEY = TaskKey("a", 0, 1)
PLACE = Placement("n", 1000, 64)


def _store(tmp_path: Path, sync: str) -> Store:
    store = Store(f"sqlite:///{tmp_path / 'd.db'}", sync=sync)
    store.migrate()
    for job_id in ("a", "b"):
        store.insert_job(job_id, "alice", "default", "n", 0, {"name": "n"}, None, None)
    return store


def _level(conn: Connection) -> int:
    return int(conn.execute(text("PRAGMA synchronous")).scalar_one())


def _spied(store: Store) -> list[int]:
    """The ``synchronous`` level each write of ``store`` commits under, from now on."""
    levels: list[int] = []
    write = store.write

    @contextmanager
    def spy(durable: bool = True) -> Iterator[Connection]:
        with write(durable) as conn:
            levels.append(_level(conn))
            yield conn

    store.write = spy  # type: ignore[method-assign]
    return levels


@pytest.mark.parametrize(
    ("sync", "durable", "inside", "after"),
    [
        ("FULL", True, FULL, FULL),
        ("FULL", False, NORMAL, FULL),
        ("NORMAL", True, NORMAL, NORMAL),
        ("NORMAL", False, NORMAL, NORMAL),
    ],
)
def test_a_write_that_need_not_survive_power_loss_lowers_sync_for_itself_only(
    tmp_path: Path, sync: str, durable: bool, inside: int, after: int
) -> None:
    store = _store(tmp_path, sync)
    try:
        with store.write(durable) as conn:
            assert _level(conn) == inside
            conn.execute(text("UPDATE jobs SET name = 'x' WHERE id = 'a'"))
        # committed, and every pooled connection is back at the store's level
        with store.read() as conn:
            assert _level(conn) == after
            assert conn.execute(text("SELECT name FROM jobs WHERE id = 'a'")).scalar() == "x"
        with store.write() as conn:
            assert _level(conn) == after
    finally:
        store.close()


def _running(job_id: str) -> JobTransition:
    return JobTransition(
        job_id, 1.0, JobState.PENDING, JobState.RUNNING, Change.STARTED, "started", 1, 0, 0.5
    )


def _plans() -> dict[str, tuple[list[Exit], TurnPlan]]:
    def plan(**fields: object) -> TurnPlan:
        return TurnPlan(1.0, **fields)  # type: ignore[arg-type]

    start = Start(KEY, PLACE)
    ended = JobTransition(
        "b", 1.0, JobState.PENDING, JobState.CANCELLED, Change.CANCELLED, "cancelled", 0, 0, 0.5
    )
    exit_ = Exit.of("b", 0, 1, 0, False, "exited")
    return {
        "start only": ([], plan(starts=[start], transitions=[_running("a")])),
        "explanations only": ([], plan(explanations={"b": None})),
        "start and an exit": ([exit_], plan(starts=[start], transitions=[_running("a")])),
        "start and a stop": ([], plan(starts=[start], stops=[Stop(KEY, PLACE, 0, 5, "x")])),
        "start and a job's end": ([], plan(starts=[start], transitions=[_running("a"), ended])),
        "start and a preemption": ([], plan(starts=[start], preempted=["b"])),
        "start and a checkpoint": (
            [],
            plan(starts=[start], checkpoints=[TaskCheckpointed("b", 0, 1, 3, "/c")]),
        ),
        "start and lost work": ([], plan(starts=[start], lost=[("b", 1, 2.0)])),
    }


VOLATILE = {"start only", "explanations only"}


@pytest.mark.parametrize("case", sorted(_plans()))
@pytest.mark.parametrize("here", [True, False])
def test_only_a_turn_that_just_starts_local_tasks_skips_the_flush(
    tmp_path: Path, case: str, here: bool
) -> None:
    store = _store(tmp_path, "FULL")
    try:
        levels = _spied(store)
        exits, plan = _plans()[case]
        store.record_turn(exits, plan, starts_die_with_host=here)
        store.record_launched([Launched(KEY, 100, 5.0, 1.5)], durable=not here)
        expected = NORMAL if here and case in VOLATILE else FULL
        assert levels == [expected, NORMAL if here else FULL]
    finally:
        store.close()
