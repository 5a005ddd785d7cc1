"""Run the alembic migrations of the source tree against a `Database`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import text

from noetl_celery.errors import StoreError

if TYPE_CHECKING:
    from noetl_celery.store.database import Database

# Any constant works: it only has to be the same for every engine process.
_MIGRATION_LOCK = 7_316_525_001


def script_location() -> Path:
    root = Path(__file__).resolve().parents[2]
    location = root / "alembic"
    if not (location / "env.py").is_file():
        raise StoreError(
            f"alembic migrations not found at {location}: install noetl-celery from its "
            "source tree (pip install -e .)"
        )
    return location


def upgrade_to_head(database: Database) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(script_location()))
    with database.engine.connect() as conn:
        if database.dialect == "postgresql":
            # two processes starting at once must not both create the tables
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _MIGRATION_LOCK})
            conn.commit()
        try:
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
            conn.commit()
        finally:
            if database.dialect == "postgresql":
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _MIGRATION_LOCK})
                conn.commit()
