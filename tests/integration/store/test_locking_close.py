"""The locking close (CompletionTx.close_and_lock, Postgres: a cursor lane continuing
locally) reads the inbox for its pass in the statement that takes the lock. That read
is the statement's snapshot, taken before the lock: when a pass committed in between,
the pass reads the inbox itself, so what that pass folded is never folded again."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.decisions import Decision, NewCommand
from noetl_celery.orchestrator.state import ExecutionState
from noetl_celery.store import queries
from noetl_celery.store.database import Database
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import ClaimedCommand

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: locking_close, path: tests/locking_close}
workflow:
  - step: start
    tool: {kind: noop}
"""


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    database = Database(pg_url)
    yield Store(database)
    database.dispose()


def running(store: Store, names: list[str]) -> dict[str, ClaimedCommand]:
    """Execution "1" with a running command per name."""
    store.create_execution("1", store.register("p", "p", PLAYBOOK), {})
    new = [NewCommand(f"1:{name}", name, "step", 1, 0) for name in names]
    with store.orchestration("1", wait=True) as tx:
        assert tx is not None
        tx.apply(Decision(state=ExecutionState("1"), commands=new), [])
    claimed = {name: store.claim(f"1:{name}", "w", 60) for name in names}
    assert all(claimed.values())
    return {name: command for name, command in claimed.items() if command is not None}


def wait_for_a_lock_wait(pg_url: str, failure: str) -> None:
    """Until a session of the database waits for a lock (at most 10 s)."""
    dsn = pg_url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + 10
        while not conn.execute(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        ).fetchone():
            assert time.monotonic() < deadline, failure
            time.sleep(0.01)


def while_a_pass_folds_a(
    store: Store, pg_url: str, other: Callable[[], None], failure: str
) -> None:
    """Run `other` on a thread while a pass holds the lock; once `other` waits for the
    lock, that pass folds command a's completion (the only one waiting) and commits."""
    holding, release = threading.Event(), threading.Event()

    def holder() -> None:
        with store.orchestration("1", wait=True) as tx:
            assert tx is not None
            holding.set()
            assert release.wait(10)
            folded = tx.inbox(1000)
            assert [c.command_id for c in folded] == ["1:a"]
            tx.apply(Decision(state=ExecutionState("1")), [c.event_id for c in folded])

    passing = threading.Thread(target=holder)
    passing.start()
    assert holding.wait(10)
    waiting = threading.Thread(target=other)
    waiting.start()
    wait_for_a_lock_wait(pg_url, failure)
    release.set()
    passing.join(10)
    waiting.join(10)


def test_the_pass_gets_the_inbox_read_with_the_lock(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = running(store, ["a", "c"])
    with store.completion(commands["c"]) as tx:  # waits in the inbox, no pass
        assert tx.close(Outcome("ok", 3)).closed
    read = queries.inbox_completions
    with store.completion(commands["a"]) as tx:
        closed, locked = tx.close_and_lock(Outcome("ok", {"rows": [1, 2]}))
        assert closed.closed and locked is not None

        def refused(*args: object) -> object:
            raise AssertionError("the pass read the inbox again")

        monkeypatch.setattr(queries, "inbox_completions", refused)
        given = locked.inbox(1000)
        monkeypatch.setattr(queries, "inbox_completions", read)
        assert [c.command_id for c in given] == ["1:c", "1:a"]
        assert given == read(tx.conn, "1", 1000)  # what it would have read, exactly
        assert locked.inbox(1000) == given  # a second read reads the table


def test_a_pass_committed_while_the_close_waited_is_not_folded_again(
    store: Store, pg_url: str
) -> None:
    commands = running(store, ["a", "b"])
    with store.completion(commands["a"]) as tx:
        assert tx.close(Outcome("ok", 1)).closed
    seen: list[list[str]] = []

    def closer() -> None:
        with store.completion(commands["b"]) as tx:
            closed, locked = tx.close_and_lock(Outcome("ok", 2))
            assert closed.closed and locked is not None
            seen.append([c.command_id for c in locked.inbox(1000)])

    while_a_pass_folds_a(store, pg_url, closer, "the close never waited for the lock")
    assert seen == [["1:b"]]  # a's completion, folded by the holder, is not read again
