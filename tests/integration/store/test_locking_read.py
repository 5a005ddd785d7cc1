"""A pass's lock (Store.orchestration, CompletionTx.lock; Postgres) reads the inbox and
its counts per epoch in the statement that takes the lock. That read is the statement's
snapshot, taken before the lock: when a pass committed in between, or the inbox holds
more than the statement reads, the pass reads the inbox itself."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.decisions import Decision, NewCommand
from noetl_celery.orchestrator.state import ExecutionState
from noetl_celery.store import queries
from noetl_celery.store.database import Database
from noetl_celery.store.queries import executions
from noetl_celery.store.repository import Store
from tests.integration.store.test_locking_close import running, while_a_pass_folds_a


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    database = Database(pg_url)
    yield Store(database)
    database.dispose()


def refuse(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    def refused(*args: object) -> object:
        raise AssertionError("the pass read the inbox again")

    for name in names:
        monkeypatch.setattr(queries, name, refused)


def test_the_lock_reads_the_inbox_and_what_waits_per_epoch(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = running(store, ["a", "b", "c"])
    items = [NewCommand(f"1:fan:{i}", "fan", "step", 2, 0, iteration=i) for i in range(3)]
    with store.orchestration("1", wait=True) as tx:
        assert tx is not None
        tx.apply(Decision(state=ExecutionState("1"), commands=items), [])
    for item in items:
        claimed = store.claim(item.command_id, "w", 60)
        assert claimed is not None
        commands[item.command_id] = claimed
    for name in ("c", "1:fan:2", "a", "1:fan:0"):  # wait in the inbox, no pass
        with store.completion(commands[name]) as tx:
            assert tx.close(Outcome("ok", {"name": name})).closed
    read, counted = queries.inbox_completions, queries.waiting
    with store.orchestration("1", wait=False) as tx:
        assert tx is not None
        refuse(monkeypatch, "inbox_completions", "waiting")
        waiting = tx.waiting()
        given = tx.inbox(1000)
        monkeypatch.setattr(queries, "inbox_completions", read)
        monkeypatch.setattr(queries, "waiting", counted)
        assert [c.command_id for c in given] == ["1:c", "1:fan:2", "1:a", "1:fan:0"]
        assert given == read(tx.conn, "1", 1000)  # what it would have read, exactly
        # per step and epoch (in no order): how many, and whether one is not a loop item
        assert sorted(waiting) == sorted(counted(tx.conn, "1"))
        assert sorted(waiting) == [("a", 1, 1, True), ("c", 1, 1, True), ("fan", 2, 2, False)]
        assert given[0].outcome.result == {"name": "c"}
        assert tx.inbox(1000) == given  # a second read reads the table
    with store.completion(commands["b"]) as tx:  # a batch's close, then its pass's lock
        assert tx.close(Outcome("ok", 2)).closed
        locked = tx.lock()
        assert locked is not None
        refuse(monkeypatch, "inbox_completions")
        assert [c.command_id for c in locked.inbox(2)] == ["1:c", "1:fan:2"]  # its limit


def test_more_than_the_statement_reads_is_read_by_the_pass(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = running(store, ["a", "b"])
    for name in ("a", "b"):
        with store.completion(commands[name]) as closing:
            assert closing.close(Outcome("ok", name)).closed
    monkeypatch.setattr(executions, "PREFETCH_LIMIT", 1)
    read = queries.inbox_completions
    calls: list[int] = []

    def counted(*args: object) -> object:
        calls.append(1)
        return read(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(queries, "inbox_completions", counted)
    with store.orchestration("1", wait=True) as tx:
        assert tx is not None
        assert [c.command_id for c in tx.inbox(1000)] == ["1:a", "1:b"]
    assert calls == [1]


def test_a_pass_committed_while_the_lock_waited_is_not_folded_again(
    store: Store, pg_url: str
) -> None:
    commands = running(store, ["a"])
    with store.completion(commands["a"]) as tx:
        assert tx.close(Outcome("ok", 1)).closed
    seen: list[tuple[list[str], list[tuple[str, int, int, bool]]]] = []

    def waiter() -> None:
        with store.orchestration("1", wait=True) as tx:
            assert tx is not None
            seen.append(([c.command_id for c in tx.inbox(1000)], tx.waiting()))

    while_a_pass_folds_a(store, pg_url, waiter, "the second pass never waited for the lock")
    assert seen == [([], [])]  # a's completion, folded by the holder, is not read again
