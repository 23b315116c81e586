"""Job arrays: an element's row names its array and its index.

An array is one row (its ``spec`` holds ``array``); an element gets a row of its own only
once it is created, as it may run, with ``array_of`` and ``array_index`` set, so an array
of 100,000 elements is one row at submission. Dependencies need no column: ``spec.after``
holds the ids they were resolved to at submission.

Columns are added in place (no table rebuild): the triggers of 0004 stay.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("array_of", sa.String(32), nullable=True))
    op.add_column("jobs", sa.Column("array_index", sa.Integer, nullable=True))
    op.create_index("ix_jobs_array_of", "jobs", ["array_of"])


def downgrade() -> None:
    op.drop_index("ix_jobs_array_of", table_name="jobs")
    if op.get_bind().dialect.name == "sqlite":
        # SQLite (3.35 and later) drops a column in place; a batch rebuild would drop the
        # job_counts triggers with the table
        op.execute("ALTER TABLE jobs DROP COLUMN array_index")
        op.execute("ALTER TABLE jobs DROP COLUMN array_of")
    else:
        op.drop_column("jobs", "array_index")
        op.drop_column("jobs", "array_of")
