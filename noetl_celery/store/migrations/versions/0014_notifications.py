"""notifications of ended executions and deadlines, delivered by the workers

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # the notification outbox (engine.notify): a row per execution end (or deadline
    # event) and target, written in the transaction that records it
    op.create_table(
        "notifications",
        sa.Column("notification_id", sa.String(700), primary_key=True),
        sa.Column("execution_id", sa.String(40), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("target", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("next_at", sa.DateTime(), nullable=False),
        sa.Column("claimed_until", sa.DateTime(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("delivered_at", sa.DateTime(), nullable=True),
        # done without a POST: the engine-wide target's deliverers do not want it
        sa.Column("skipped", sa.Boolean(), nullable=False, server_default=sa.text("false")),
    )
    where = sa.text("delivered_at IS NULL")
    op.create_index(
        "ix_notifications_due",
        "notifications",
        ["next_at"],
        postgresql_where=where,
        sqlite_where=where,
    )
    op.create_index("ix_notifications_execution", "notifications", ["execution_id"])
    # a schedule's runs may have a deadline (`schedule add --deadline`,
    # `metadata.schedule.deadline`): a duration or a time of day in its time zone
    op.add_column("schedules", sa.Column("deadline", sa.String(32), nullable=True))
    # each deadline event once per execution
    deadline = sa.text("type IN ('deadline.at_risk', 'deadline.missed')")
    op.create_index(
        "ux_events_deadline",
        "events",
        ["execution_id", "type"],
        unique=True,
        postgresql_where=deadline,
        sqlite_where=deadline,
    )


def downgrade() -> None:
    op.drop_index("ux_events_deadline", table_name="events")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("deadline")
    op.drop_table("notifications")
