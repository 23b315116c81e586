"""Job counts by queue and state, kept by triggers: ``/v1/queues``, the dashboard and the
``hetsched_jobs`` metric read one row per queue and state instead of counting the jobs
table (a scan that grew with the backlog and the history).

Every insert, delete, and change of a job's ``state`` or ``queue`` adjusts ``job_counts``
in the same transaction, whichever code path writes it, so the counts cannot drift from the
rows. On PostgreSQL the trigger first takes a transaction-level advisory lock: transactions
that change jobs' states then update the counter rows one at a time, never in two orders
that could deadlock (SQLite serializes its writers anyway).

SQLite drops a table's triggers with the table: a later migration that rebuilds ``jobs``
(``batch_alter_table`` copies it into a new table) must create them again
(``create_triggers``); ``tests/controlplane/test_store.py`` checks that they exist.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

#: any fixed number: the advisory lock that orders PostgreSQL's counter updates
_PG_LOCK = 418_004

_SQLITE = [
    """
    CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs BEGIN
        INSERT INTO job_counts (queue, state, n) VALUES (NEW.queue, NEW.state, 1)
        ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
    END
    """,
    """
    CREATE TRIGGER job_counts_update AFTER UPDATE OF state, queue ON jobs
    WHEN OLD.state IS NOT NEW.state OR OLD.queue IS NOT NEW.queue BEGIN
        UPDATE job_counts SET n = n - 1 WHERE queue = OLD.queue AND state = OLD.state;
        INSERT INTO job_counts (queue, state, n) VALUES (NEW.queue, NEW.state, 1)
        ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
    END
    """,
    """
    CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs BEGIN
        UPDATE job_counts SET n = n - 1 WHERE queue = OLD.queue AND state = OLD.state;
    END
    """,
]

_POSTGRES = [
    f"""
    CREATE FUNCTION job_counts_keep() RETURNS trigger AS $$
    BEGIN
        PERFORM pg_advisory_xact_lock({_PG_LOCK});
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            UPDATE job_counts SET n = n - 1 WHERE queue = OLD.queue AND state = OLD.state;
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
            INSERT INTO job_counts (queue, state, n) VALUES (NEW.queue, NEW.state, 1)
            ON CONFLICT (queue, state) DO UPDATE SET n = job_counts.n + 1;
        END IF;
        RETURN NULL;
    END
    $$ LANGUAGE plpgsql
    """,
    """
    CREATE TRIGGER job_counts_insert_delete AFTER INSERT OR DELETE ON jobs
    FOR EACH ROW EXECUTE FUNCTION job_counts_keep()
    """,
    """
    CREATE TRIGGER job_counts_update AFTER UPDATE OF state, queue ON jobs
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.queue IS DISTINCT FROM NEW.queue)
    EXECUTE FUNCTION job_counts_keep()
    """,
]


def create_triggers() -> None:
    """The triggers that keep ``job_counts``, for the dialect of the connection."""
    statements = _POSTGRES if op.get_bind().dialect.name == "postgresql" else _SQLITE
    for statement in statements:
        op.execute(statement)


def drop_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS job_counts_insert_delete ON jobs")
        op.execute("DROP TRIGGER IF EXISTS job_counts_update ON jobs")
        op.execute("DROP FUNCTION IF EXISTS job_counts_keep()")
    else:
        for name in ("insert", "update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS job_counts_{name}")


def upgrade() -> None:
    op.create_table(
        "job_counts",
        sa.Column("queue", sa.String(63), primary_key=True),
        sa.Column("state", sa.String(16), primary_key=True),
        sa.Column("n", sa.Integer, nullable=False),
    )
    op.execute(
        "INSERT INTO job_counts (queue, state, n) "
        "SELECT queue, state, COUNT(*) FROM jobs GROUP BY queue, state"
    )
    create_triggers()


def downgrade() -> None:
    drop_triggers()
    op.drop_table("job_counts")
