"""the inbox becomes its own table; commands are updated in place (HOT)

- `inbox`: one row per completion not yet folded (deleted by the folding pass), replacing
  `events.handled` and its partial index: marking an event handled rewrote every index
  entry of the event row
- `commands`: no index on `status` (each status change wrote a new entry into every
  index); fillfactor 70 leaves room for in-place updates

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "inbox",
        sa.Column("event_id", _ID, primary_key=True, autoincrement=False),
        sa.Column("execution_id", sa.String(length=40), nullable=False),
        sa.Column("step", sa.String(length=256), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=True),
        sa.Column("iteration", sa.Integer(), nullable=True),
    )
    op.create_index("ix_inbox_execution", "inbox", ["execution_id", "event_id"])
    op.execute(
        "INSERT INTO inbox (event_id, execution_id, step, epoch, iteration) "
        "SELECT event_id, execution_id, step, epoch, iteration FROM events WHERE handled = false"
    )
    op.drop_index("ix_events_inbox", table_name="events")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("handled")
    op.drop_index("ix_commands_active", table_name="commands")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE commands SET (fillfactor = 70)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE commands RESET (fillfactor)")
    op.create_index(
        "ix_commands_active",
        "commands",
        ["status", "issued_at"],
        postgresql_where=sa.text("status IN ('issued', 'running')"),
        sqlite_where=sa.text("status IN ('issued', 'running')"),
    )
    with op.batch_alter_table("events") as batch:
        batch.add_column(
            sa.Column("handled", sa.Boolean(), nullable=False, server_default=sa.true())
        )
    op.execute("UPDATE events SET handled = false WHERE event_id IN (SELECT event_id FROM inbox)")
    op.create_index(
        "ix_events_inbox",
        "events",
        ["execution_id", "event_id"],
        postgresql_where=sa.text("handled = false"),
        sqlite_where=sa.text("handled = false"),
    )
    op.drop_index("ix_inbox_execution", table_name="inbox")
    op.drop_table("inbox")
