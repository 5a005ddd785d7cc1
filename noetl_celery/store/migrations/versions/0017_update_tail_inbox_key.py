"""commands: the columns issue, claim and close update come last (Postgres); the inbox's
one index is its primary key (execution, event)

An in-place (HOT) update of a row logs the new row version less the bytes it shares at
the start and at the end with the old one. Every loop item's command row is updated
three times (planned -> issued -> running -> finished), and each update changes
`status`, which sat before `item` and `meta`: each logged nearly the whole row. With
`ctx_version`, `worker`, `lease_until`, the three timestamps and `status` at the end,
each logs a few dozen bytes (docs/performance.md, Postgres per item).

Postgres cannot reorder columns in place: the table is copied into one created in the
new order (under the migration's exclusive lock; stop the workers first, as for every
upgrade). SQLite rewrites a whole row on every update whatever the order: nothing to do.

The inbox had a primary key on the event and an index on (execution, event); every pass
reads and deletes its entries by execution, so the second alone serves as the primary
key: one index entry per completion instead of two. Both dialects; the table holds only
what no pass folded yet.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# (name, type) in the new order: what is written once first, what changes last
_NEW = (
    ("command_id", "varchar(512) NOT NULL"),
    ("execution_id", "varchar(40) NOT NULL"),
    ("step", "varchar(256) NOT NULL"),
    ("kind", "varchar(16) NOT NULL"),
    ("epoch", "integer NOT NULL"),
    ("iteration", "integer"),
    ("attempt", "integer NOT NULL"),
    ("item", "jsonb"),
    ("meta", "jsonb"),
    ("resume", "jsonb"),
    ("deadline_at", "timestamp without time zone"),
    ("republished", "integer DEFAULT 0 NOT NULL"),
    ("ctx_version", "integer NOT NULL"),
    ("worker", "varchar(256)"),
    ("lease_until", "timestamp without time zone"),
    ("issued_at", "timestamp without time zone"),
    ("started_at", "timestamp without time zone"),
    ("finished_at", "timestamp without time zone"),
    ("status", "varchar(16) NOT NULL"),
)
# the order migrations 0001-0016 left (0002 and 0004 appended three columns)
_OLD = [
    "command_id",
    "execution_id",
    "step",
    "kind",
    "epoch",
    "iteration",
    "attempt",
    "status",
    "ctx_version",
    "item",
    "meta",
    "worker",
    "lease_until",
    "issued_at",
    "started_at",
    "finished_at",
    "resume",
    "deadline_at",
    "republished",
]
_TYPES = dict(_NEW)


def _rebuild(order: list[str]) -> None:
    columns = ", ".join(order)
    body = ",\n    ".join(f"{name} {_TYPES[name]}" for name in order)
    # the primary key's index gets its usual name only once the old table is gone
    op.execute(
        f"CREATE TABLE commands_0017 (\n    {body},\n"
        "    CONSTRAINT commands_0017_pkey PRIMARY KEY (command_id)\n"
        ") WITH (fillfactor = 70)"
    )
    op.execute(f"INSERT INTO commands_0017 ({columns}) SELECT {columns} FROM commands")
    op.execute("DROP TABLE commands")
    op.execute("ALTER TABLE commands_0017 RENAME TO commands")
    op.execute("ALTER TABLE commands RENAME CONSTRAINT commands_0017_pkey TO commands_pkey")
    op.execute(
        "CREATE INDEX ix_commands_execution_step ON commands (execution_id, step, epoch, iteration)"
    )
    op.execute("ANALYZE commands")


_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_INBOX = "step, epoch, iteration, execution_id, event_id"


def _inbox(*key: str) -> None:
    """The inbox again, with `key` as its primary key (its rows copied). On Postgres
    the key's index gets its usual name once the old table is gone."""
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "inbox_0017",
        sa.Column("execution_id", sa.String(length=40), nullable=False),
        sa.Column("event_id", _ID, nullable=False, autoincrement=False),
        sa.Column("step", sa.String(length=256), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=True),
        sa.Column("iteration", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint(*key, name="inbox_0017_pkey" if postgres else "inbox_pkey"),
    )
    op.execute(f"INSERT INTO inbox_0017 ({_INBOX}) SELECT {_INBOX} FROM inbox")
    op.drop_table("inbox")  # with its indexes
    op.rename_table("inbox_0017", "inbox")
    if postgres:
        op.execute("ALTER TABLE inbox RENAME CONSTRAINT inbox_0017_pkey TO inbox_pkey")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _rebuild([name for name, _ in _NEW])
    _inbox("execution_id", "event_id")


def downgrade() -> None:
    _inbox("event_id")
    op.create_index("ix_inbox_execution", "inbox", ["execution_id", "event_id"])
    if op.get_bind().dialect.name == "postgresql":
        _rebuild(_OLD)
