"""engine identity, how executions were started, captured command logs

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import datetime as dt
import uuid

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    info = op.create_table(
        "engine_info",
        sa.Column("key", sa.String(length=64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    # the database's identity: every command message carries it, and a worker refuses a
    # message minted against another database (a client and workers on different URLs).
    # A copy made with CREATE DATABASE ... TEMPLATE shares the row, so readers combine it
    # with the database's name.
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    op.bulk_insert(info, [{"key": "database_id", "value": uuid.uuid4().hex, "created_at": now}])
    with op.batch_alter_table("executions") as batch:
        batch.add_column(
            sa.Column("trigger", sa.String(length=16), nullable=False, server_default="manual")
        )
        batch.add_column(sa.Column("rerun_of", sa.String(length=40), nullable=True))
        batch.add_column(sa.Column("trigger_detail", _JSON, nullable=True))
    op.create_table(
        "command_logs",
        sa.Column("log_id", _ID, primary_key=True, autoincrement=True),
        sa.Column("execution_id", sa.String(length=40), nullable=False),
        sa.Column("command_id", sa.String(length=512), nullable=True),
        sa.Column("step", sa.String(length=256), nullable=True),
        sa.Column("iteration", sa.Integer(), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("truncated", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_command_logs_execution", "command_logs", ["execution_id", "log_id"])


def downgrade() -> None:
    op.drop_index("ix_command_logs_execution", table_name="command_logs")
    op.drop_table("command_logs")
    with op.batch_alter_table("executions") as batch:
        batch.drop_column("trigger_detail")
        batch.drop_column("rerun_of")
        batch.drop_column("trigger")
    op.drop_table("engine_info")
