"""The store's schema: SQLAlchemy Core tables. Alembic migrations in ``migrations/`` create
exactly these; ``tests/controlplane/test_store.py`` checks that the two agree.

Times are wall-clock seconds (``time.time()``). Job and allocation keys are generated ids,
never names, so a deleted-and-resubmitted name can never pick up an old record.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

__all__ = [
    "allocations",
    "job_counts",
    "jobs",
    "leases",
    "metadata",
    "nodes",
    "speed_estimates",
    "store_marks",
    "tasks",
    "tokens",
    "transitions",
]

metadata = MetaData()

tokens = Table(
    "tokens",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("owner", String(63), nullable=False),
    #: sha256 of the token; the token itself is never stored
    Column("digest", String(64), nullable=False, unique=True),
    Column("admin", Boolean, nullable=False, default=False),
    Column("created_at", Float, nullable=False),
    Column("revoked_at", Float, nullable=True),
)

jobs = Table(
    "jobs",
    metadata,
    #: arrival order; replayed in this order on restart
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("id", String(32), nullable=False, unique=True),
    Column("owner", String(63), nullable=False, index=True),
    Column("queue", String(63), nullable=False),
    Column("name", String(253), nullable=False),
    Column("priority", Integer, nullable=False, default=0),
    #: the validated submission, normalized (JobSpec fields plus command, env, workdir)
    Column("spec", JSON, nullable=False),
    #: the client's idempotency key, unique per owner, and a digest of the body it came with
    Column("request_key", String(200), nullable=True),
    Column("body_digest", String(64), nullable=True),
    Column("state", String(16), nullable=False, index=True),
    Column("reason", Text, nullable=False, default=""),
    Column("explanation", JSON, nullable=True),
    Column("run", Integer, nullable=False, default=0),
    Column("restarts", Integer, nullable=False, default=0),
    Column("preemptions", Integer, nullable=False, default=0),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("submitted_at", Float, nullable=False),
    Column("started_at", Float, nullable=True),
    #: when the first run started: submit-to-start latency is first_started_at - submitted_at
    Column("first_started_at", Float, nullable=True),
    Column("ended_at", Float, nullable=True),
    Column("exit_code", Integer, nullable=True),
    #: the last checkpoint a task reported, as the next run resumes from it: time, run,
    #: step, path (null: none, or the job starts from scratch)
    Column("checkpoint", JSON, nullable=True),
    #: seconds of work lost by runs stopped to run again (since their last checkpoint)
    Column("lost_work_s", Float, nullable=False, default=0.0, server_default=text("0")),
    Column("migrations", Integer, nullable=False, default=0, server_default=text("0")),
    #: an array's element: the array's id and the element's index (migration 0005)
    Column("array_of", String(32), nullable=True, index=True),
    Column("array_index", Integer, nullable=True),
    UniqueConstraint("owner", "request_key", name="uq_jobs_owner_request_key"),
)

#: jobs per queue and state, kept by triggers on ``jobs`` (migration 0004) in the same
#: transaction as every insert, delete and change of state or queue: what ``/v1/queues`` and
#: the ``hetsched_jobs`` metric read instead of counting the jobs table. A row at 0 stays.
job_counts = Table(
    "job_counts",
    metadata,
    Column("queue", String(63), primary_key=True),
    Column("state", String(16), primary_key=True),
    Column("n", Integer, nullable=False),
)

transitions = Table(
    "transitions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String(32), ForeignKey("jobs.id"), nullable=False, index=True),
    Column("time", Float, nullable=False),
    Column("source", String(16), nullable=True),
    Column("target", String(16), nullable=False),
    Column("cause", Text, nullable=False),
    #: an elastic job's count after the change (migration 0006); NULL for other jobs
    Column("count", Integer, nullable=True),
)

#: task states: starting (bound, process not yet recorded), running, stopping (asked to stop),
#: exited (ended on its own), stopped (ended on our request), lost (gone without a trace);
#: reserved: where a moving job's next run goes (its allocations held from the Migrate on;
#: ``starting`` when the run before has stopped, deleted if the move is given up)
tasks = Table(
    "tasks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String(32), ForeignKey("jobs.id"), nullable=False, index=True),
    Column("task", Integer, nullable=False),
    Column("run", Integer, nullable=False),
    Column("node", String(253), nullable=False),
    Column("placement", JSON, nullable=False),
    Column("state", String(16), nullable=False, index=True),
    Column("pid", Integer, nullable=True),
    #: the process's start time (psutil create_time): a pid alone may have been reused
    Column("pid_started", Float, nullable=True),
    Column("bound_at", Float, nullable=False),
    Column("started_at", Float, nullable=True),
    Column("ended_at", Float, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("reason", Text, nullable=False, default=""),
    UniqueConstraint("job_id", "task", "run", name="uq_tasks_job_task_run"),
)

allocations = Table(
    "allocations",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String(32), ForeignKey("jobs.id"), nullable=False),
    Column("task", Integer, nullable=False),
    Column("run", Integer, nullable=False),
    Column("device_id", String(253), nullable=False),
    #: milli-units of the device (1000 = whole)
    Column("share", Integer, nullable=False),
    Column("allocated_at", Float, nullable=False),
    Column("released_at", Float, nullable=True),
    #: 1 while held, NULL once released (so it can take part in the partial unique index)
    Column("live", Boolean, nullable=True),
    Index("ix_allocations_live", "job_id", "task", "run"),
    # The second line of defence against double allocation: at most one live whole-device
    # allocation per device, whatever the in-memory core believes.
    Index(
        "ux_allocations_live_whole",
        "device_id",
        unique=True,
        sqlite_where=text("live = 1 AND share = 1000"),
        postgresql_where=text("live AND share = 1000"),
    ),
)

#: learned throughput per (job type, device model): steps/s of one device (speedlearn.py)
speed_estimates = Table(
    "speed_estimates",
    metadata,
    Column("job_type", String(253), primary_key=True),
    Column("model", String(253), primary_key=True),
    Column("rate", Float, nullable=False),
    Column("samples", Integer, nullable=False),
    Column("updated_at", Float, nullable=False),
)

#: leader leases of standby pairs (controlplane/leadership.py): one row per lease name; the
#: holder leads until ``expires_at``, and every takeover raises ``epoch`` by one
leases = Table(
    "leases",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("holder", String(63), nullable=False),
    Column("epoch", Integer, nullable=False),
    #: where the holder's API is reached (what a standby redirects to)
    Column("url", String(2048), nullable=False),
    Column("renewed_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
)

#: the store's own marks: ``probe`` (the write that tells whether the store can be written
#: again after an outage), ``created`` (when and by which home the schema was made)
store_marks = Table(
    "store_marks",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", Text, nullable=False),
    Column("at", Float, nullable=False),
)

#: the cluster's nodes as the service saw them (migration 0010): the node's cluster-file
#: entry (``model.cluster_spec.node_entry``), its place, when it first joined and last left
#: (NULL while it is there): what ``hetsched history export`` writes as the cluster
nodes = Table(
    "nodes",
    metadata,
    Column("name", String(253), primary_key=True),
    Column("entry", JSON, nullable=False),
    #: the ids of its devices, in the entry's order (a rebuilt node numbers them afresh)
    Column("device_ids", JSON, nullable=False),
    #: its place in the scheduler's order of nodes (ties between equal nodes go to the
    #: first): the order at the last start, nodes that joined later after them
    Column("position", Integer, nullable=False),
    Column("joined_at", Float, nullable=False),
    Column("left_at", Float, nullable=True),
)
