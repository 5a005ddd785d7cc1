"""`Engine.start_text(validated=...)`: a caller that validated the text already (`run`
prints the warnings first) hands the report over instead of having it parsed again."""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl_celery.errors import PlaybookInvalid
from noetl_celery.models.validation import validate_text
from tests.support.engines import embedded_engine

ROOT = Path(__file__).resolve().parents[3]
HELLO = (ROOT / "playbooks" / "examples" / "hello_world.yaml").read_text()


def test_the_validated_playbook_is_the_one_the_execution_runs(tmp_path: Path) -> None:
    engine = embedded_engine(f"sqlite:///{tmp_path / 'noetl.sqlite3'}", tmp_path)
    try:
        report = validate_text(HELLO, "hello_world.yaml")
        execution_id = engine.start_text(HELLO, file="hello_world.yaml", validated=report)
        row = engine.wait(execution_id, timeout=60)
        assert row.status == "COMPLETED", row.error
        # the passes and tasks read the version through the cache: the object validated
        assert engine.playbooks.get(row.catalog_id) is report.playbook
        # a second start of the same text reuses the version and the parse it cached
        again = engine.start_text(HELLO, file="hello_world.yaml")
        assert engine.wait(again, timeout=60).catalog_id == row.catalog_id
        assert engine.playbooks.get(row.catalog_id) is report.playbook
    finally:
        engine.close()


def test_an_invalid_report_refuses_the_start_and_registers_nothing(tmp_path: Path) -> None:
    engine = embedded_engine(f"sqlite:///{tmp_path / 'noetl.sqlite3'}", tmp_path)
    bad = HELLO.replace("kind: python", "kind: pythn", 1)
    try:
        report = validate_text(bad, "bad.yaml")
        assert not report.ok
        with pytest.raises(PlaybookInvalid) as caught:
            engine.start_text(bad, file="bad.yaml", validated=report)
        assert caught.value.problems == report.problems
        assert engine.store.overview.list_executions() == []
        assert engine.catalog.listing() == []
    finally:
        engine.close()


def test_a_report_of_another_text_is_refused(tmp_path: Path) -> None:
    """The catalog must show what runs: a report made for other text starts nothing."""
    engine = embedded_engine(f"sqlite:///{tmp_path / 'noetl.sqlite3'}", tmp_path)
    other = HELLO.replace("Hello World", "Goodbye")
    try:
        with pytest.raises(ValueError, match="report of another text"):
            engine.start_text(HELLO, validated=validate_text(other))
        assert engine.store.overview.list_executions() == []
        assert engine.catalog.listing() == []
    finally:
        engine.close()
