"""Initial schema: tokens, jobs, transitions, tasks, allocations.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("owner", sa.String(63), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float, nullable=True),
    )
    op.create_table(
        "jobs",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(32), nullable=False, unique=True),
        sa.Column("owner", sa.String(63), nullable=False),
        sa.Column("queue", sa.String(63), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("request_key", sa.String(200), nullable=True),
        sa.Column("body_digest", sa.String(64), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("explanation", sa.JSON, nullable=True),
        sa.Column("run", sa.Integer, nullable=False),
        sa.Column("restarts", sa.Integer, nullable=False),
        sa.Column("preemptions", sa.Integer, nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("submitted_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("first_started_at", sa.Float, nullable=True),
        sa.Column("ended_at", sa.Float, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.UniqueConstraint("owner", "request_key", name="uq_jobs_owner_request_key"),
    )
    op.create_index("ix_jobs_owner", "jobs", ["owner"])
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_table(
        "transitions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("source", sa.String(16), nullable=True),
        sa.Column("target", sa.String(16), nullable=False),
        sa.Column("cause", sa.Text, nullable=False),
    )
    op.create_index("ix_transitions_job_id", "transitions", ["job_id"])
    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("task", sa.Integer, nullable=False),
        sa.Column("run", sa.Integer, nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("placement", sa.JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("pid", sa.Integer, nullable=True),
        sa.Column("pid_started", sa.Float, nullable=True),
        sa.Column("bound_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("ended_at", sa.Float, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.UniqueConstraint("job_id", "task", "run", name="uq_tasks_job_task_run"),
    )
    op.create_index("ix_tasks_job_id", "tasks", ["job_id"])
    op.create_index("ix_tasks_state", "tasks", ["state"])
    op.create_table(
        "allocations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("task", sa.Integer, nullable=False),
        sa.Column("run", sa.Integer, nullable=False),
        sa.Column("device_id", sa.String(253), nullable=False),
        sa.Column("share", sa.Integer, nullable=False),
        sa.Column("allocated_at", sa.Float, nullable=False),
        sa.Column("released_at", sa.Float, nullable=True),
        sa.Column("live", sa.Boolean, nullable=True),
    )
    op.create_index("ix_allocations_live", "allocations", ["job_id", "task", "run"])
    op.create_index(
        "ux_allocations_live_whole",
        "allocations",
        ["device_id"],
        unique=True,
        sqlite_where=sa.text("live = 1 AND share = 1000"),
        postgresql_where=sa.text("live AND share = 1000"),
    )


def downgrade() -> None:
    for table in ("allocations", "tasks", "transitions", "jobs", "tokens"):
        op.drop_table(table)
