"""A command nobody took is shown as waiting for a worker, not as running (both stores)."""

from __future__ import annotations

from pathlib import Path

from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: lonely}
workflow:
  - step: start
    tool: {kind: noop}
"""


def test_issued_but_unclaimed_is_waiting(store_url: str, tmp_path: Path) -> None:
    # no dispatcher: the command is issued and nobody will ever claim it
    engine = Engine(Settings(home=tmp_path, database_url=store_url), schema=SchemaMode.MIGRATE)
    try:
        eid = engine.start_text(PLAYBOOK)
        view = engine.status(eid)
        assert view["status"] == "RUNNING"
        assert view["current"] == []
        [waiting] = view["waiting"]
        assert (waiting["step"], waiting["commands"]) == ("start", 1)
        assert waiting["seconds"] is not None and waiting["seconds"] >= 0
        # once a worker claims it, it is running and no longer waiting
        command = engine.store.claim(f"{eid}:start:1", "w:1", 30)
        assert command is not None
        view = engine.status(eid)
        assert (view["current"], view["waiting"]) == (["start"], [])
    finally:
        engine.close()
