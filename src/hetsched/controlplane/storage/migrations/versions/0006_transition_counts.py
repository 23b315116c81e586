"""An elastic job's count in its history: each transition of an elastic job records how
many tasks its run has (its start, each resize), so ``job``, ``why`` and the dashboard show
its count over time. NULL for other jobs and for rows written before.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("transitions", sa.Column("count", sa.Integer, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("transitions") as batch:
        batch.drop_column("count")
