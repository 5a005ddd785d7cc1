"""messages the broker could not take, published by the workers' relays

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a row per command (or wake-up) whose publish failed (engine.outbox); empty nearly
    # always, so the relays' poll of it costs nothing
    op.create_table(
        "publish_outbox",
        sa.Column("item_id", sa.String(512), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("execution_id", sa.String(40), nullable=False),
        sa.Column("held_at", sa.DateTime(), nullable=False),
        sa.Column("claimed_until", sa.DateTime(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("publish_outbox")
