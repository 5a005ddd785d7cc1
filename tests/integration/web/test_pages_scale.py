"""The executions list at 3,000 executions (the read models' scale fixture): a page of
rows, rendered in well under a second, whatever the offset."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode
from noetl_celery.web.pages.site import Site
from tests.integration.store.test_overview_scale import EXECUTIONS, fill

pytestmark = pytest.mark.integration


@pytest.fixture
def engine(pg_url: str, tmp_path: Path) -> Iterator[Engine]:
    built = Engine(Settings(home=tmp_path, database_url=pg_url), schema=SchemaMode.REQUIRE)
    yield built
    built.close()


def test_the_list_renders_one_page_of_thousands(engine: Engine) -> None:
    fill(engine.store)
    site = Site(engine)
    for offset in ("0", "2950"):
        started = time.monotonic()
        answer = site.executions({"limit": "50", "offset": offset})
        elapsed = time.monotonic() - started
        assert answer.status == 200 and elapsed < 1.0, elapsed
        assert len(re.findall(r'<tr data-execution="', answer.body)) == 50
        assert f"of {EXECUTIONS} executions" in answer.body
    # the newest first; the running ones show their live loop counters
    page = site.executions({"limit": "10", "status": "RUNNING"})
    assert re.findall(r'<tr data-execution="(\w+)"', page.body)[0] == f"x{EXECUTIONS}"
    assert f"of {EXECUTIONS // 10} executions" in page.body


BIG = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: scale_big, path: tests/scale_big}
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: big}]}
  - step: big
    loop: {in: "{{ range(100000) | list }}", iterator: n}
    tool: {kind: noop}
  - step: each
    loop: {in: "{{ range(10) | list }}", iterator: n}
    tool: {kind: noop}
"""


def test_the_detail_of_a_100000_item_loop_pages_its_failed_items(engine: Engine) -> None:
    from sqlalchemy import text

    # x1: a 100,000-item loop `big`, 31 of its items failed (and a 10-item `each`)
    fill(engine.store)
    _, entry = engine.register_text(BIG)
    with engine.store.db.engine.begin() as conn:
        conn.execute(
            text("UPDATE executions SET catalog_id = :c WHERE execution_id = 'x1'"),
            {"c": entry.catalog_id},
        )
        conn.execute(
            text(
                "INSERT INTO loops (execution_id, step, epoch, mode, total, issued, succeeded, "
                "failed, done, updated_at, started_at) VALUES ('x1', 'big', 1, 'items', "
                "100000, 100000, 99969, 31, true, now(), now() - interval '100 seconds')"
            )
        )
    site = Site(engine)
    started = time.monotonic()
    answer = site.execution("x1", {})
    elapsed = time.monotonic() - started
    assert answer.status == 200 and elapsed < 2.0, (elapsed, answer.body[-400:])
    body = answer.body
    assert "100000 / 100000 (100.0%)" in body
    assert len(re.findall(r'<details id="failed-big-1-', body)) == 20  # one page of 31
    assert "1–20 of 31 failed items" in body  # noqa: RUF001
    second = site.execution(
        "x1", {"failed_step": "big", "failed_epoch": "1", "failed_offset": "20"}
    )
    ids = re.findall(r'<details id="failed-big-1-(\d+)"', second.body)
    assert len(ids) == 11 and ids[0] == str(20 * 3333)
    assert "item 66660" in second.body  # each with its error
