"""sub-playbooks: a child's spawn key and a waiting command's continuation

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.add_column("commands", sa.Column("resume", _JSON, nullable=True))
    op.add_column("executions", sa.Column("spawn_key", sa.String(length=640), nullable=True))
    op.create_index("ux_executions_spawn_key", "executions", ["spawn_key"], unique=True)


def downgrade() -> None:
    op.drop_index("ux_executions_spawn_key", table_name="executions")
    op.drop_column("executions", "spawn_key")
    op.drop_column("commands", "resume")
