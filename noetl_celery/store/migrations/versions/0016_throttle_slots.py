"""keyed `rate_limit`: the run slots of its `concurrency`, shared by the worker processes,
and the learned limit of a key's pacing row

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a row per held slot (store.throttle): the primary key (key, slot_no) with slot_no
    # below the cap is what keeps the bodies under one key from exceeding it
    op.create_table(
        "throttle_slots",
        sa.Column("key", sa.String(300), primary_key=True),
        sa.Column("slot_no", sa.Integer(), primary_key=True),
        sa.Column("command_id", sa.String(512), nullable=False),
        sa.Column("acquired_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_throttle_slots_command", "throttle_slots", ["command_id"])
    # a keyed rate_limit's `key:<key>` row keeps the estimate of its real limit from its
    # last 429: its rate is probed no higher while that cut is fresh
    with op.batch_alter_table("http_pace") as batch:
        batch.add_column(sa.Column("learned", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("http_pace") as batch:
        batch.drop_column("learned")
    op.drop_index("ix_throttle_slots_command", table_name="throttle_slots")
    op.drop_table("throttle_slots")
