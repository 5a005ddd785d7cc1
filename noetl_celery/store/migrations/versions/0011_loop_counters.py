"""the counters a worker's close reads on the loops row

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # the close reads an epoch's window and commands in flight from its loops row, not
    # from the orchestrator's snapshot (store.completion); rows written before this
    # revision read 0, which never defers a completion (it folds at once, as it did)
    with op.batch_alter_table("loops") as batch:
        batch.add_column(sa.Column("window_size", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("in_flight", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("loops") as batch:
        batch.drop_column("in_flight")
        batch.drop_column("window_size")
