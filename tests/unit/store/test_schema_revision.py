"""`SCHEMA_REVISION`, which the engine compares with a plain SELECT (alembic is not
imported to check the tables), is the head of the migrations shipped: a new migration
without bumping it (or the reverse) fails here, not in a deployment."""

from __future__ import annotations

from alembic.config import Config
from alembic.script import ScriptDirectory

from noetl_celery.store.migrate import revisions, script_location
from noetl_celery.store.schema import SCHEMA_REVISION


def test_schema_revision_is_the_migrations_head() -> None:
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    script = ScriptDirectory.from_config(config)
    assert script.get_heads() == [SCHEMA_REVISION]
    assert revisions() == {s.revision for s in script.walk_revisions()}
