"""cron schedules and their firings; rows claimed per cursor epoch

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("schedule_id", _ID, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(length=600), nullable=True),
        sa.Column("path", sa.String(length=512), nullable=False),
        sa.Column("cron", sa.String(length=256), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("payload", _JSON, nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("next_fire_at", sa.DateTime(), nullable=False),
        sa.Column("last_fire_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ux_schedules_name", "schedules", ["name"], unique=True)
    op.create_index("ix_schedules_due", "schedules", ["enabled", "next_fire_at"])
    op.create_table(
        "schedule_firings",
        sa.Column("schedule_id", _ID, primary_key=True),
        sa.Column("fire_time", sa.DateTime(), primary_key=True),
        sa.Column("execution_id", sa.String(length=40), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )

    op.create_table(
        "cursor_rows",
        sa.Column("execution_id", sa.String(length=40), primary_key=True),
        sa.Column("step", sa.String(length=256), primary_key=True),
        sa.Column("epoch", sa.Integer(), primary_key=True),
        sa.Column("row_key", sa.String(length=64), primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("cursor_rows")
    op.drop_table("schedule_firings")
    op.drop_index("ix_schedules_due", table_name="schedules")
    op.drop_index("ux_schedules_name", table_name="schedules")
    op.drop_table("schedules")
