"""leases for single-instance duties; command deadlines; republish counts

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=128), primary_key=True),
        sa.Column("owner", sa.String(length=256), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
    )
    op.add_column("commands", sa.Column("deadline_at", sa.DateTime(), nullable=True))
    op.add_column(
        "commands",
        sa.Column("republished", sa.Integer(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_column("commands", "republished")
    op.drop_column("commands", "deadline_at")
    op.drop_table("leases")
