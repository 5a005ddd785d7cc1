"""Values Postgres cannot store, on the real Postgres store with in-process workers.

A result holding a NUL character fails its command once, at once, with kind
`result_not_storable` (it used to escape the close, leave the command `running` until its
lease ran out, run again `NOETL_MAX_ATTEMPTS` times and end as a lost worker). A value
the orchestration pass cannot store (here a variable set from a template) fails the
execution with the crash named, after the command itself was closed once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.engine.summaries import RunSummary
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode

pytestmark = pytest.mark.integration

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: nul}\n"
LEASE = 30


@pytest.fixture
def engine(pg_url: str, tmp_path: Path) -> Iterator[Engine]:
    built = Engine(
        Settings(
            home=tmp_path,
            database_url=pg_url,
            lease_seconds=LEASE,
            reaper_interval_seconds=0.2,
            wake_grace_seconds=0.2,
        ),
        schema=SchemaMode.MIGRATE,
    )
    built.use_in_process_workers()
    yield built
    built.close()


def run(engine: Engine, text: str) -> tuple[RunSummary, float]:
    started = time.monotonic()
    eid = engine.start_text(HEAD + text)
    engine.wait(eid, 60)
    return engine.summary(eid), time.monotonic() - started


def test_a_result_with_a_nul_character_fails_its_step_at_once(engine: Engine) -> None:
    summary, seconds = run(
        engine,
        """workflow:
  - step: emit
    tool: {kind: python, code: "result = 'a' + chr(0) + 'b'"}
""",
    )
    assert seconds < 5, f"took {seconds:.1f}s: the lease ({LEASE}s) ran out?"
    assert summary["status"] == "FAILED"
    message = (
        "step 'emit' returned a value that cannot be stored: result contains a NUL "
        "character (\\u0000), which Postgres cannot store"
    )
    assert summary["error"] == f"step 'emit' failed: {message}"
    assert summary["errors"] == [
        {"step": "emit", "item": None, "kind": "result_not_storable", "message": message}
    ]
    eid = summary["execution_id"]
    counts = engine.store.command_counts(eid)
    assert (counts.failed, counts.expired, counts.running) == (1, 0, 0)  # ran once
    [failed] = engine.events(eid, types=["command.failed"])
    assert failed["command_id"] == f"{eid}:emit:1"
    assert failed["payload"]["result"] is None


def test_a_loop_item_whose_result_cannot_be_stored_fails_alone(engine: Engine) -> None:
    summary, seconds = run(
        engine,
        """workflow:
  - step: each
    loop: {in: "{{ range(6) | list }}", iterator: i, spec: {mode: parallel, max_in_flight: 3}}
    tool:
      kind: python
      input: {i: "{{ iter.i }}"}
      code: |
        text = "x" + chr(0) if i == 4 else "fine"
        result = {"i": i, "nested": {"texts": ["ok", text]}}
""",
    )
    assert seconds < 5, f"took {seconds:.1f}s: the lease ({LEASE}s) ran out?"
    assert summary["status"] == "FAILED"
    each = summary["steps"]["each"]
    assert each["stats"] == {"total": 6, "success": 5, "failed": 1}
    assert [r.get("i") for r in each["results"]] == [0, 1, 2, 3, None, 5]
    [error] = summary["errors"]
    assert (error["step"], error["item"], error["kind"]) == ("each", 4, "result_not_storable")
    assert error["message"] == (
        "step 'each' item 4 returned a value that cannot be stored: "
        "result.nested.texts[1] contains a NUL character (\\u0000), which Postgres cannot store"
    )
    counts = engine.store.command_counts(summary["execution_id"])
    assert (counts.completed, counts.failed, counts.expired) == (5, 1, 0)


def test_a_pass_that_cannot_store_its_state_fails_the_execution(engine: Engine) -> None:
    # the step's result is fine; the variable its `set` makes (Jinja turns `\x00` into a
    # NUL) is not, and the pass that folds the step cannot save the execution's state
    summary, seconds = run(
        engine,
        """workflow:
  - step: emit
    tool: {kind: python, code: "result = {'v': 1}"}
    set: {ctx.bad: "{{ 'a\\\\x00b' }}"}
""",
    )
    assert seconds < LEASE, "the command was left running until its lease ran out"
    assert summary["status"] == "FAILED"
    assert str(summary["error"]).startswith(
        "the engine could not orchestrate this execution: 3 passes in a row crashed "
        "(DataError: (psycopg.errors.UntranslatableCharacter) unsupported Unicode escape"
    )
    assert [e["kind"] for e in summary["errors"]] == ["engine_error"]
    eid = summary["execution_id"]
    counts = engine.store.command_counts(eid)
    assert (counts.completed, counts.expired, counts.running) == (1, 0, 0)  # closed once
    assert len(engine.events(eid, types=["pass.failed"])) == 3
