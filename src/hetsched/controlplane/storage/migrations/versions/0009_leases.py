"""Leader leases: which `hetsched up` of a standby pair leads, under which epoch.

One row per lease name. A process leads while its row is unexpired; a standby takes the
lease over once it has expired, raising ``epoch`` by one in the same statement (a compare
on the epoch it read), so two processes never both take one epoch. The leader's writes
check the epoch in their own transaction (docs/service.md, "A standby").

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("holder", sa.String(63), nullable=False),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("renewed_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leases")
