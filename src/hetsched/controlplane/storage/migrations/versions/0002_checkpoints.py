"""Checkpoints: each job's last checkpoint, the work it lost to stops, and its migrations.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("checkpoint", sa.JSON, nullable=True))
        batch.add_column(
            sa.Column("lost_work_s", sa.Float, nullable=False, server_default=sa.text("0"))
        )
        batch.add_column(
            sa.Column("migrations", sa.Integer, nullable=False, server_default=sa.text("0"))
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("migrations")
        batch.drop_column("lost_work_s")
        batch.drop_column("checkpoint")
