"""the process that owns an embedded execution

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # embedded executions run on the threads of the process that started them:
    # `host:pid:boot.start` names that process (the start time tells a reused pid apart),
    # so the next embedded start can end the ones whose process is gone
    with op.batch_alter_table("executions") as batch:
        batch.add_column(sa.Column("owner", sa.String(length=256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("executions") as batch:
        batch.drop_column("owner")
