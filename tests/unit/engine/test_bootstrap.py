"""engine.bootstrap's role table: what each caller's engine may do to the tables and
where its commands go (the behaviour each composition root had before sharing it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl_celery.engine.bootstrap import Dispatch, EngineOptions, Role, options_for
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode

PG = "postgresql+psycopg://u@db/noetl"

# (role, database_url) -> options
TABLE = [
    (Role.READER, "", EngineOptions(SchemaMode.READ, Dispatch.NONE, True)),
    (Role.READER, PG, EngineOptions(SchemaMode.REQUIRE, Dispatch.NONE, True)),
    (Role.EDITOR, "", EngineOptions(SchemaMode.MIGRATE, Dispatch.NONE, True)),
    (Role.EDITOR, PG, EngineOptions(SchemaMode.REQUIRE, Dispatch.NONE, True)),
    (Role.CLIENT, "", EngineOptions(SchemaMode.MIGRATE, Dispatch.LOCAL_OR_BROKER, True)),
    (Role.CLIENT, PG, EngineOptions(SchemaMode.REQUIRE, Dispatch.LOCAL_OR_BROKER, True)),
    (Role.SERVER, "", EngineOptions(SchemaMode.MIGRATE, Dispatch.LOCAL_OR_BROKER, True)),
    (Role.SERVER, PG, EngineOptions(SchemaMode.REQUIRE, Dispatch.LOCAL_OR_BROKER, True)),
    # a worker never creates or migrates tables, even the embedded file's
    (Role.WORKER, "", EngineOptions(SchemaMode.REQUIRE, Dispatch.BROKER, False)),
    (Role.WORKER, PG, EngineOptions(SchemaMode.REQUIRE, Dispatch.BROKER, False)),
]


@pytest.mark.parametrize(("role", "url", "expected"), TABLE)
def test_role_options(tmp_path: Path, role: Role, url: str, expected: EngineOptions) -> None:
    assert options_for(role, Settings(home=tmp_path, database_url=url)) == expected


def test_every_role_is_in_the_table() -> None:
    assert {role for role, _, _ in TABLE} == set(Role)


def test_options_do_not_depend_on_the_broker(tmp_path: Path) -> None:
    # the broker decides where dispatched commands go when built, not what a role may do
    for role in Role:
        local = options_for(role, Settings(home=tmp_path, database_url=PG))
        broker = Settings(home=tmp_path, database_url=PG, broker_url="redis://r:6379/0")
        assert options_for(role, broker) == local
