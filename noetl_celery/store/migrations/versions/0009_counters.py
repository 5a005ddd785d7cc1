"""engine-wide counters for /metrics

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # what the reaper did (republished, re-issued, lost leases, timeouts), counted in the
    # transaction that did it (store.counters)
    op.create_table(
        "counters",
        sa.Column("name", sa.String(length=64), primary_key=True),
        sa.Column("value", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("counters")
