"""a loop epoch's quarantined items, counted apart from its failed ones

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_QUARANTINED = "type = 'item.quarantined'"
_REDRIVEN = "type = 'item.redriven'"


def upgrade() -> None:
    # items a `do: quarantine` policy (or `loop.spec.on_item_error: quarantine`) set
    # aside: neither succeeded nor failed; rows written before this revision had none
    with op.batch_alter_table("loops") as batch:
        batch.add_column(sa.Column("quarantined", sa.Integer(), nullable=False, server_default="0"))
    # one `item.quarantined` event per loop item: listed by `noetl-celery quarantine`,
    # and skipped by the failed-items reads through this index
    where = sa.text(_QUARANTINED)
    op.create_index(
        "ux_events_item_quarantined",
        "events",
        ["execution_id", "step", "epoch", "iteration"],
        unique=True,
        postgresql_where=where,
        sqlite_where=where,
    )
    # one `item.redriven` per quarantined item: a second redrive of it is refused
    where = sa.text(_REDRIVEN)
    op.create_index(
        "ux_events_item_redriven",
        "events",
        ["execution_id", "step", "epoch", "iteration"],
        unique=True,
        postgresql_where=where,
        sqlite_where=where,
    )


def downgrade() -> None:
    op.drop_index("ux_events_item_redriven", table_name="events")
    op.drop_index("ux_events_item_quarantined", table_name="events")
    with op.batch_alter_table("loops") as batch:
        batch.drop_column("quarantined")
