"""script files stored with the catalog version

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # `script:` files read where the playbook was registered, so workers on other
    # machines run them without the file (passes.scripts)
    op.add_column(
        "catalog",
        sa.Column(
            "scripts", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True
        ),
    )


def downgrade() -> None:
    op.drop_column("catalog", "scripts")
