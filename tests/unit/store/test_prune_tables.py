"""Every engine table has a place in retention: deleted with its execution (keyed by
`execution_id`), or never touched. A table added without one fails here, so a prune can
never leave the rows of deleted executions behind unnoticed."""

from __future__ import annotations

from noetl_celery.store.queries import prune
from noetl_celery.store.schema import metadata


def test_every_table_is_deleted_with_its_execution_or_kept() -> None:
    deleted = {t.name for t in prune.EXECUTION_TABLES}
    kept = set(prune.KEPT_TABLES)
    assert not deleted & kept
    assert deleted | kept | {"executions"} == set(metadata.tables)


def test_the_deleted_tables_are_keyed_by_execution() -> None:
    for table in prune.EXECUTION_TABLES:
        assert "execution_id" in table.c, table.name


def test_the_inbox_goes_before_the_events_it_names() -> None:
    order = [t.name for t in prune.EXECUTION_TABLES]
    assert order.index("inbox") < order.index("events")
