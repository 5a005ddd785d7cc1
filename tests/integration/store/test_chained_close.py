"""The chained close of a per-frame cursor claim (orchestrator.cursor's chains,
store.frames): one statement closes the claim with its frame's body and issues the lane's
next claim, running, claimed by the closing worker, while the execution runs and the
loop epoch is not done; the claim's completion says whether it did (`chained`), which is
what the pass takes as issued. Postgres only (SQLite closes every frame with a pass)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text, update

from noetl_celery.engine.service import Engine
from noetl_celery.errors import ResultNotStorable
from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.ids import claim_command_id
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode
from noetl_celery.store.queries import NextClaim
from noetl_celery.store.rows import ClaimedCommand, FrameRows, LogRow
from noetl_celery.store.schema import command_logs, commands, events, executions, loops
from noetl_celery.worker.frames import body_command, next_claim, with_body
from tests.support.frames_by_hand import FRAMES

ROWS = [{"id": 1}, {"id": 2}]


@pytest.fixture
def engine(pg_url: str, tmp_path: Path) -> Iterator[Engine]:
    engine = Engine(Settings(home=tmp_path, database_url=pg_url), schema=SchemaMode.MIGRATE)
    try:
        yield engine
    finally:
        engine.close()


def claimed_frame(engine: Engine) -> tuple[ClaimedCommand, Outcome, Any]:
    """The lane's first claim, running, its rows recorded, its body run (ok): what
    worker.frames hands the close (the claim's outcome, the body as `ran`)."""
    eid = engine.start_text(FRAMES)
    claim = engine.store.claim(claim_command_id(eid, "drain", 1, 0, 1), "w", 60)
    assert claim is not None and (claim.meta or {}).get("chain") == 9
    frame = engine.store.record_frame(claim, ROWS)
    assert frame is not None
    iteration = int((claim.meta or {})["iteration"])
    body = body_command(claim, engine.playbooks.get(claim.catalog_id), iteration, ROWS)
    done = Outcome("ok", {"n": 2})
    claimed = Outcome("ok", {"rows": ROWS, "row_count": 2, "recorded": True})
    claimed.result["iteration"] = iteration
    return claim, with_body(claimed, done), [(body, done)]


def chain(
    engine: Engine,
    claim: ClaimedCommand,
    outcome: Outcome,
    ran: Any,
    logs: tuple[LogRow, ...] = (),
    rows: list[Any] | None = None,
) -> tuple[Any, ClaimedCommand]:
    """The chained close; `rows`: the next claim's frame, claimed ahead."""
    following = next_claim(claim, int((claim.meta or {})["iteration"]))
    done = engine.store.frames.close_and_chain(
        claim, outcome, (ran, "w"), NextClaim(following, 60, rows), logs
    )
    return done, following


def claimed_keys(engine: Engine, claim: ClaimedCommand) -> int:
    """Row keys claimed in the claim's epoch (schema.cursor_rows)."""
    with engine.database.engine.connect() as conn:
        found = conn.execute(
            text("SELECT count(*) FROM cursor_rows WHERE execution_id = :e AND epoch = :p"),
            {"e": claim.execution_id, "p": claim.epoch},
        ).scalar_one()
    return int(found)


def row_of(engine: Engine, command_id: str) -> Any:
    with engine.database.engine.connect() as conn:
        return conn.execute(
            select(commands.c.status, commands.c.worker, commands.c.meta, commands.c.item)
            .add_columns(commands.c.ctx_version, commands.c.lease_until)
            .where(commands.c.command_id == command_id)
        ).first()


def completion_of(engine: Engine, command_id: str) -> dict[str, Any]:
    with engine.database.engine.connect() as conn:
        payload = conn.execute(
            select(events.c.payload).where(
                events.c.command_id == command_id, events.c.type == "command.completed"
            )
        ).scalar_one()
    return dict(payload["result"])


def test_a_chained_close_issues_the_lanes_next_claim_to_its_worker(engine: Engine) -> None:
    claim, outcome, ran = claimed_frame(engine)
    done, following = chain(engine, claim, outcome, ran)
    assert done is not None
    closed, issued, recorded = done
    assert closed.closed and issued and recorded is None  # no frame claimed ahead
    assert row_of(engine, claim.command_id).status == "completed"
    nxt = row_of(engine, following.command_id)
    assert (nxt.status, nxt.worker, nxt.ctx_version) == ("running", "w", claim.ctx_version)
    assert nxt.item == {"lane": 0, "frame": 2} and nxt.lease_until is not None
    assert nxt.meta == {"max_rows": 3, "process": "frame", "iteration": 1, "chain": 9}
    assert completion_of(engine, claim.command_id)["chained"] is True
    [(body, _)] = ran
    assert row_of(engine, body.command_id).status == "completed"  # the frame's body row


@pytest.mark.parametrize("ended", ["execution", "loop"])
def test_no_next_claim_once_the_execution_or_the_loop_ended(engine: Engine, ended: str) -> None:
    """Closed, not chained: the completion does not say `chained`, no next claim row."""
    claim, outcome, ran = claimed_frame(engine)
    with engine.database.engine.begin() as conn:
        if ended == "execution":
            conn.execute(
                update(executions)
                .where(executions.c.execution_id == claim.execution_id)
                .values(status="FAILED")
            )
        else:
            conn.execute(
                update(loops).where(loops.c.execution_id == claim.execution_id).values(done=True)
            )
    done, following = chain(engine, claim, outcome, ran, rows=[{"id": 7}])
    assert done is not None
    closed, issued, recorded = done
    assert closed.closed and not issued and recorded is None
    assert row_of(engine, following.command_id) is None
    assert claimed_keys(engine, claim) == 2  # the rows claimed ahead are not recorded
    assert "chained" not in completion_of(engine, claim.command_id)


def test_a_claim_no_longer_running_writes_nothing(engine: Engine) -> None:
    claim, outcome, ran = claimed_frame(engine)
    with engine.database.engine.begin() as conn:
        conn.execute(
            update(commands)
            .where(commands.c.command_id == claim.command_id)
            .values(status="cancelled")
        )
    done, following = chain(engine, claim, outcome, ran, rows=[{"id": 7}])
    assert done is not None and not done[0].closed and not done[1]
    assert claimed_keys(engine, claim) == 2
    assert row_of(engine, following.command_id) is None
    [(body, _)] = ran
    assert row_of(engine, body.command_id) is None


def test_a_next_claim_already_there_is_not_taken_as_issued_here(engine: Engine) -> None:
    """(A run of the claim before this one issued it: its completion says `chained`,
    this one's does not, and the row is left as it was.)"""
    claim, outcome, ran = claimed_frame(engine)
    following = next_claim(claim, int((claim.meta or {})["iteration"]))
    with engine.database.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO commands (command_id, execution_id, step, kind, epoch, attempt, "
                "status, ctx_version) VALUES (:c, :e, 'drain', 'claim', 1, 1, 'issued', 1)"
            ),
            {"c": following.command_id, "e": claim.execution_id},
        )
    done, _ = chain(engine, claim, outcome, ran, rows=[{"id": 7}])
    assert done is not None and done[0].closed and not done[1]
    assert row_of(engine, following.command_id).status == "issued"
    assert claimed_keys(engine, claim) == 2
    assert "chained" not in completion_of(engine, claim.command_id)


def test_the_output_the_claim_printed_is_stored_with_its_chained_close(engine: Engine) -> None:
    claim, outcome, ran = claimed_frame(engine)
    logs = (LogRow(claim.execution_id, claim.command_id, "drain", None, "50 rows\n", False),)
    done, _ = chain(engine, claim, outcome, ran, logs)
    assert done is not None and done[1]
    with engine.database.engine.connect() as conn:
        stored = conn.execute(
            select(command_logs.c.text).where(command_logs.c.command_id == claim.command_id)
        ).scalars()
        assert list(stored) == ["50 rows\n"]


def test_a_body_outcome_the_database_refuses_writes_nothing(engine: Engine) -> None:
    claim, outcome, ran = claimed_frame(engine)
    [(body, _)] = ran
    refused = Outcome("ok", {"text": "a\x00b"})
    with pytest.raises(ResultNotStorable):
        chain(engine, claim, with_body(outcome, refused), [(body, refused)])
    assert row_of(engine, claim.command_id).status == "running"
    assert row_of(engine, body.command_id) is None


def test_a_frame_claimed_ahead_is_recorded_on_the_next_claim(engine: Engine) -> None:
    """Rows the worker claimed for the next claim before the close: recorded on it as
    record_frame would (their keys claimed in the epoch, the ones claimed before left
    out and counted as duplicates), returned for the worker to run them next."""
    claim, outcome, ran = claimed_frame(engine)
    ahead = [{"id": 2}, {"id": 3}, {"id": 4}, {"id": 3}]  # 2: this frame's; 3: twice
    done, following = chain(engine, claim, outcome, ran, rows=ahead)
    assert done is not None
    closed, issued, recorded = done
    assert closed.closed and issued
    assert recorded == FrameRows([{"id": 3}, {"id": 4}], duplicates=2)
    assert row_of(engine, following.command_id).status == "running"
    with engine.database.engine.connect() as conn:
        resume = conn.execute(
            select(commands.c.resume).where(commands.c.command_id == following.command_id)
        ).scalar_one()
    assert FrameRows.of(resume) == recorded
    assert claimed_keys(engine, claim) == 4  # 1, 2 (this frame) and 3, 4
