"""The cluster's nodes as the service saw them: each node's cluster-file entry, its
devices' ids, its place in the scheduler's order of nodes, when it first joined and when it
last left. ``hetsched history export`` writes them as the cluster a replay runs on
(docs/simulator.md, "Replaying the service's history").

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(253), primary_key=True),
        sa.Column("entry", sa.JSON, nullable=False),
        sa.Column("device_ids", sa.JSON, nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("joined_at", sa.Float, nullable=False),
        sa.Column("left_at", sa.Float, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("nodes")
