"""Alembic environment. Used programmatically by `noetl-celery db upgrade` (which passes
an open connection) and by the `alembic` command (which reads NOETL_DATABASE_URL)."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine

from noetl_celery.store.database import normalise_url
from noetl_celery.store.schema import for_postgres

config = context.config
target_metadata = for_postgres()  # with its Postgres-only options


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = os.environ.get("NOETL_DATABASE_URL")
    if not url:
        raise SystemExit("set NOETL_DATABASE_URL to the database to migrate")
    engine = create_engine(normalise_url(url))
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run against a database")
run_migrations_online()
