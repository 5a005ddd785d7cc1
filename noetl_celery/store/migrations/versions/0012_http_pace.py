"""the http tool's pacing schedule shared by the worker processes

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a row per paced host (store.pacing): worker processes book their requests' send
    # slots from it instead of each learning its own share of an API's rate limit

    def zero(name: str, kind: type[sa.types.TypeEngine[Any]] = sa.Float) -> sa.Column[Any]:
        return sa.Column(name, kind(), nullable=False, server_default="0")

    op.create_table(
        "http_pace",
        sa.Column("host", sa.String(300), primary_key=True),
        sa.Column("rate", sa.Float(), nullable=True),
        sa.Column("ceiling", sa.Float(), nullable=True),
        zero("tat"),
        zero("paused_until"),
        zero("last_cut"),
        zero("last_raise"),
        zero("slack_at"),
        zero("epoch_at"),
        zero("epoch_count"),
        sa.Column("rate_before", sa.Float(), nullable=True),
        zero("bucket_at"),
        zero("bucket_n", sa.Integer),
        zero("prev_n", sa.Integer),
    )


def downgrade() -> None:
    op.drop_table("http_pace")
