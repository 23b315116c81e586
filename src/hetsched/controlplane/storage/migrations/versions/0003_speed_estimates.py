"""Speed estimates: the throughput learned per (job type, device model) from progress.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "speed_estimates",
        sa.Column("job_type", sa.String(253), primary_key=True),
        sa.Column("model", sa.String(253), primary_key=True),
        sa.Column("rate", sa.Float, nullable=False),
        sa.Column("samples", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("speed_estimates")
