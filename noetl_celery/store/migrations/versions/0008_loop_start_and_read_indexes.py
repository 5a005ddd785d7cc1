"""when loop epochs started; indexes for the HTTP read models

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_FAILED_ITERATION = "type = 'command.failed' AND iteration IS NOT NULL"


def upgrade() -> None:
    # a loop's rate and ETA need its start; epochs recorded before this stay null (no rate)
    with op.batch_alter_table("loops") as batch:
        batch.add_column(sa.Column("started_at", sa.DateTime(), nullable=True))
    # the executions listing pages newest first without a status filter
    op.create_index("ix_executions_created", "executions", ["created_at"])
    # failed items of a loop paged and counted without reading its successful iterations
    # (a 100,000-item loop with 30 failures reads 30 index entries)
    where = sa.text(_FAILED_ITERATION)
    op.create_index(
        "ix_events_failed_iterations",
        "events",
        ["execution_id", "step", "epoch", "iteration"],
        postgresql_where=where,
        sqlite_where=where,
    )


def downgrade() -> None:
    op.drop_index("ix_events_failed_iterations", table_name="events")
    op.drop_index("ix_executions_created", table_name="executions")
    with op.batch_alter_table("loops") as batch:
        batch.drop_column("started_at")
