"""The store's contract, run against SQLite and Postgres alike: the invariants of design
§2 are enforced by the database, not by process memory."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from sqlalchemy import func, select

from noetl_celery.constants import ExecutionStatus
from noetl_celery.models.outcome import Outcome, StepError
from noetl_celery.orchestrator.batching import EpochBacklog
from noetl_celery.orchestrator.decisions import (
    Decision,
    EngineEvent,
    IssueRange,
    LoopMirror,
    LoopPlan,
    NewCommand,
    ResultWrite,
)
from noetl_celery.orchestrator.state import ExecutionState
from noetl_celery.store.completion import Closed
from noetl_celery.store.database import Database, SchemaMode
from noetl_celery.store.orchestration import Follow
from noetl_celery.store.queries import decisions
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import LoopCounters
from noetl_celery.store.schema import commands, events

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: contract, path: tests/contract}
workflow:
  - step: start
    tool: {kind: noop}
"""


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    database = Database(store_url)
    database.prepare(SchemaMode.MIGRATE)
    yield Store(database)
    database.dispose()


def new_execution(store: Store, eid: str = "100") -> str:
    entry = store.register("tests/contract", "contract", PLAYBOOK)
    store.create_execution(eid, entry, {"a": 1})
    return eid


def apply(
    store: Store, eid: str, decision: Decision, handled: list[int] | None = None
) -> list[str]:
    with store.orchestration(eid, wait=True) as tx:
        assert tx is not None
        return tx.apply(decision, handled or [])


def decision(eid: str, **parts: object) -> Decision:
    d = Decision(state=ExecutionState(execution_id=eid))
    for key, value in parts.items():
        setattr(d, key, value)
    return d


def test_catalog_versions_by_content(store: Store) -> None:
    first = store.register("p", "n", "a")
    same = store.register("p", "n", "a")
    second = store.register("p", "n", "b")
    assert (first.version, first.created) == (1, True)
    assert (same.version, same.created) == (1, False)
    assert (second.version, second.created) == (2, True)
    assert store.resolve_catalog("p").version == 2
    assert store.resolve_catalog("p", 1).catalog_id == first.catalog_id


def test_a_command_is_inserted_once_and_published_by_its_inserter_only(store: Store) -> None:
    eid = new_execution(store)
    cmd = NewCommand(f"{eid}:start:1", "start", "step", 1, 0)
    assert apply(store, eid, decision(eid, commands=[cmd])) == [cmd.command_id]
    # the same decision again (a redone pass): no second row, nothing to publish
    assert apply(store, eid, decision(eid, commands=[cmd])) == []
    with store.db.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(commands)).scalar() == 1


def test_claim_is_conditional(store: Store) -> None:
    eid = new_execution(store)
    cmd = NewCommand(f"{eid}:start:1", "start", "step", 1, 0)
    apply(store, eid, decision(eid, commands=[cmd]))
    claimed = store.claim(cmd.command_id, "w1", 60)
    assert claimed is not None and claimed.step == "start"
    assert store.claim(cmd.command_id, "w2", 60) is None  # duplicate delivery: dropped


def test_one_terminal_event_per_command(store: Store) -> None:
    eid = new_execution(store)
    cmd = NewCommand(f"{eid}:start:1", "start", "step", 1, 0)
    apply(store, eid, decision(eid, commands=[cmd]))
    claimed = store.claim(cmd.command_id, "w1", 60)
    assert claimed is not None
    assert store.complete(claimed, Outcome("ok", 1)) is True
    assert store.complete(claimed, Outcome("ok", 2)) is False
    with store.db.engine.connect() as conn:
        terminal = conn.execute(
            select(func.count()).select_from(events).where(events.c.command_id == cmd.command_id)
        ).scalar()
    assert terminal == 1
    assert store.has_unhandled(eid)
    with store.orchestration(eid, wait=True) as tx:
        assert tx is not None
        inbox = tx.inbox(10)
        assert [c.outcome.result for c in inbox] == [1]
        tx.mark_handled([c.event_id for c in inbox])
    assert not store.has_unhandled(eid)


def test_a_pass_marks_handled_exactly_what_it_folded_with_its_state(store: Store) -> None:
    """apply() deletes the handled inbox entries together with the state write (one
    statement on Postgres): the others stay waiting, the state and pass count are saved."""
    eid = new_execution(store)
    cmds = [NewCommand(f"{eid}:start:{n}", "start", "step", n, 0) for n in (1, 2, 3)]
    apply(store, eid, decision(eid, commands=cmds))
    for cmd in cmds:
        claimed = store.claim(cmd.command_id, "w1", 60)
        assert claimed is not None and store.complete(claimed, Outcome("ok", cmd.epoch))
    with store.orchestration(eid, wait=True) as tx:
        assert tx is not None
        waiting = tx.inbox(10)
    folded = [c.event_id for c in waiting[:2]]
    passes = store.execution(eid).passes
    state = ExecutionState(execution_id=eid, ctx_version=7)
    apply(store, eid, Decision(state=state), folded)
    with store.orchestration(eid, wait=True) as tx:
        assert tx is not None
        assert [c.outcome.result for c in tx.inbox(10)] == [3]
        assert tx.execution.state is not None and tx.execution.state["ctx_version"] == 7
        assert tx.execution.passes == passes + 1
    apply(store, eid, Decision(state=state), [])  # nothing folded: the state is still saved
    assert store.execution(eid).passes == passes + 2
    assert store.has_unhandled(eid)


def test_one_loop_done_per_epoch(store: Store) -> None:
    eid = new_execution(store)
    done = EngineEvent("loop.done", "each", 1, {"stats": {}})
    apply(store, eid, decision(eid, events=[done]))
    apply(store, eid, decision(eid, events=[done, EngineEvent("loop.done", "each", 2, {})]))
    rows = [e for e in store.events(eid) if e.type == "loop.done"]
    assert [(e.step, e.epoch) for e in rows] == [("each", 1), ("each", 2)]


def test_one_terminal_per_execution(store: Store) -> None:
    eid = new_execution(store)
    apply(store, eid, decision(eid, events=[EngineEvent("execution.completed")]))
    apply(store, eid, decision(eid, events=[EngineEvent("execution.failed")]))
    terminal = [
        e.type
        for e in store.events(eid)
        if e.type.startswith("execution.") and e.type != "execution.started"
    ]
    assert terminal == ["execution.completed"]


def test_planned_iterations_are_issued_once(store: Store) -> None:
    eid = new_execution(store)
    plan = LoopPlan("each", 1, [{"i": i} for i in range(10)], 0, {"iterator": "x", "total": 10})
    first = apply(store, eid, decision(eid, plans=[plan], issues=[IssueRange("each", 1, 0, 4, 0)]))
    assert first == [f"{eid}:each:1:{i}" for i in range(4)]
    overlap = apply(store, eid, decision(eid, issues=[IssueRange("each", 1, 2, 6, 0)]))
    assert overlap == [f"{eid}:each:1:4", f"{eid}:each:1:5"]
    claimed = store.claim(f"{eid}:each:1:5", "w", 60)
    assert claimed is not None and claimed.item == {"i": 5} and claimed.iteration == 5


def test_planned_rows_are_the_same_on_both_stores_across_chunks(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Postgres plans from arrays (one INSERT per chunk), SQLite row by row: the rows
    are the same (a None item reads back None), with the plan's meta and context, and a
    row already there is left as it was."""
    monkeypatch.setattr(decisions, "PLAN_CHUNK", 2)  # three chunks for five items
    eid = new_execution(store)
    items = [{"i": 0, "deep": {"x": [1, None]}}, None, "text", 3.5, ["a"]]
    meta = {"iterator": "x", "total": 5}
    first = LoopPlan("each", 1, items[:1], 4, meta, start=7)
    apply(store, eid, decision(eid, plans=[first]))
    apply(store, eid, decision(eid, plans=[replace(first, items=["changed", *items[1:]])]))
    with store.db.engine.connect() as conn:
        rows = conn.execute(
            select(
                commands.c.command_id,
                commands.c.kind,
                commands.c.iteration,
                commands.c.attempt,
                commands.c.status,
                commands.c.ctx_version,
                commands.c.item,
                commands.c.meta,
            )
            .where(commands.c.execution_id == eid)
            .order_by(commands.c.iteration)
        ).all()
    assert [tuple(r) for r in rows] == [
        (f"{eid}:each:1:{7 + n}", "iteration", 7 + n, 1, "planned", 4, item, meta)
        for n, item in enumerate(items)
    ]


def test_a_plan_issued_whole_is_inserted_issued_and_published_once(store: Store) -> None:
    """A pass that plans and issues a whole (small) plan inserts its rows issued; the
    same decision again publishes nothing; a plan whose rows were planned already (by an
    earlier pass) still gets them issued, each published once."""
    eid = new_execution(store)
    plan = LoopPlan("each", 1, [{"i": 0}, {"i": 1}], 3, {"iterator": "x"}, start=10)
    whole = decision(eid, plans=[plan], issues=[IssueRange("each", 1, 10, 12, 5)])
    assert apply(store, eid, whole) == [f"{eid}:each:1:10", f"{eid}:each:1:11"]
    assert apply(store, eid, whole) == []  # a redone pass: nothing twice
    claimed = store.claim(f"{eid}:each:1:11", "w", 60)
    assert claimed is not None and claimed.item == {"i": 1} and claimed.ctx_version == 5
    planned = LoopPlan("each", 2, [{"i": 0}, {"i": 1}, {"i": 2}], 0, {"iterator": "x"})
    apply(store, eid, decision(eid, plans=[replace(planned, items=planned.items[:1])]))
    again = apply(
        store, eid, decision(eid, plans=[planned], issues=[IssueRange("each", 2, 0, 3, 0)])
    )
    assert sorted(again) == [f"{eid}:each:2:{i}" for i in range(3)]
    assert store.claim(f"{eid}:each:2:0", "w", 60) is not None  # the planned row, issued


def test_a_pass_claims_the_follow_it_was_asked_for_and_publishes_the_rest(store: Store) -> None:
    """A pass asked for a follow (worker.execute's local continuation) claims the command
    `pick` chooses among those it issues, in its own writes: running, leased to the
    worker, not claimable again, the rest issued and published; a delayed command is
    never offered. Asked again (a redone pass), it inserts nothing and claims nothing."""
    eid = new_execution(store)
    plan = LoopPlan("each", 1, [{"i": 0}, None], 3, {"iterator": "x"}, start=4)
    claim = NewCommand(f"{eid}:each:1:c", "each", "claim", 1, 3, item={"lane": 0})
    later = NewCommand(f"{eid}:each:1:d", "each", "claim", 1, 3, delay_seconds=60)
    whole = decision(
        eid, commands=[claim, later], plans=[plan], issues=[IssueRange("each", 1, 4, 6, 5)]
    )
    offered: list[list[str]] = []

    def pick(ids: list[str]) -> str:
        offered.append(ids)
        return f"{eid}:each:1:5"

    with store.orchestration(eid, wait=True) as tx:
        assert tx is not None
        tx.follow = Follow(pick, "w1", 60)
        publish = tx.apply(whole, [])
        followed = tx.followed
    assert offered == [[claim.command_id, f"{eid}:each:1:4", f"{eid}:each:1:5"]]
    assert publish == [claim.command_id, f"{eid}:each:1:4", f"{eid}:each:1:5"]
    assert followed is not None
    assert (followed.command_id, followed.kind, followed.iteration) == (
        f"{eid}:each:1:5",
        "iteration",
        5,
    )
    assert (followed.item, followed.ctx_version, followed.meta) == (None, 5, {"iterator": "x"})
    assert store.claim(followed.command_id, "w2", 60) is None  # claimed already
    assert store.claim(f"{eid}:each:1:4", "w2", 60) is not None  # issued
    assert store.claim(later.command_id, "w2", 60) is None  # delayed: the sweep issues it
    with store.db.engine.connect() as conn:
        row = conn.execute(
            select(
                commands.c.status,
                commands.c.worker,
                commands.c.lease_until,
                commands.c.item.is_(None).label("sql_null"),
            ).where(commands.c.command_id == followed.command_id)
        ).one()
    assert (row.status, row.worker) == ("running", "w1") and row.lease_until is not None
    assert row.sql_null is False  # a None item is stored as JSON null, as every path does
    with store.orchestration(eid, wait=True) as tx:  # the same pass again
        assert tx is not None
        tx.follow = Follow(pick, "w1", 60)
        assert tx.apply(whole, []) == []
        assert tx.followed is None


def mirror(in_flight: int, issued: int, succeeded: int, *, done: bool = False) -> LoopMirror:
    return LoopMirror("each", 1, "parallel", 20, issued, succeeded, 0, done, 10, in_flight)


def test_the_close_reads_its_loop_epochs_counters_from_the_loops_row(store: Store) -> None:
    """A worker's close reads its epoch's window and in-flight count from the loops row
    the last pass wrote (not the execution's snapshot, which here has no loop at all),
    with the completions of that epoch waiting in the inbox."""
    eid = new_execution(store)
    plan = LoopPlan("each", 1, [{"i": i} for i in range(20)], 0, {"iterator": "x", "total": 20})
    issue = IssueRange("each", 1, 0, 10, 0)
    apply(store, eid, decision(eid, plans=[plan], issues=[issue], loops=[mirror(10, 10, 0)]))

    def close(iteration: int) -> Closed:
        claimed = store.claim(f"{eid}:each:1:{iteration}", "w", 60)
        assert claimed is not None
        with store.completion(claimed) as tx:
            return tx.close(Outcome("ok", iteration))

    first, second = close(0), close(1)
    assert (first.closed, first.status, first.waiting) == (True, "RUNNING", 1)
    assert first.loop == LoopCounters(done=False, window=10, in_flight=10)
    assert (second.loop, second.waiting) == (first.loop, 2)
    # a pass folds both and refills the window: the next close reads its counters
    with store.orchestration(eid, wait=True) as tx:
        assert tx is not None
        handled = [c.event_id for c in tx.inbox(10)]
        tx.apply(
            decision(eid, issues=[IssueRange("each", 1, 10, 12, 0)], loops=[mirror(10, 12, 2)]),
            handled,
        )
    third = close(2)
    assert (third.loop, third.waiting) == (LoopCounters(False, 10, 10), 1)
    # a command outside any loop epoch has no row to read
    cmd = NewCommand(f"{eid}:start:1", "start", "step", 1, 0)
    apply(store, eid, decision(eid, commands=[cmd]))
    claimed = store.claim(cmd.command_id, "w", 60)
    assert claimed is not None
    with store.completion(claimed) as completing:
        assert completing.close(Outcome("ok", 1)).loop is None


def test_a_batch_closes_in_one_call_what_one_by_one_closes_would(store: Store) -> None:
    """`close_many` (one statement on Postgres) closes each running command with its own
    terminal event and payload, in order, skips one that is not running, and its last
    close of the epoch reads every completion waiting, its own included."""
    eid = new_execution(store)
    plan = LoopPlan("each", 1, [{"i": i} for i in range(20)], 0, {"iterator": "x", "total": 20})
    issue = IssueRange("each", 1, 0, 10, 0)
    apply(store, eid, decision(eid, plans=[plan], issues=[issue], loops=[mirror(10, 10, 0)]))
    claimed = {}
    for i in (0, 1, 3):
        got = store.claim(f"{eid}:each:1:{i}", "w", 60)
        assert got is not None
        claimed[i] = got
    with store.completion(claimed[0]) as tx:
        assert tx.close(Outcome("ok", "zero")).waiting == 1
    unclaimed = replace(claimed[1], command_id=f"{eid}:each:1:2", iteration=2)
    batch = [
        # quotes, a backslash and non-ASCII: the payloads travel as one JSON array
        (claimed[1], Outcome("ok", {"one": 1, "text": 'a "b" \\ c \u00fc'})),
        (unclaimed, Outcome("ok", "never")),
        (claimed[3], Outcome.failed(StepError("python_error", "three breaks"))),
    ]
    with store.completion(claimed[1]) as tx:
        closes = tx.close_many(batch)

    assert [c.closed for c in closes] == [True, False, True]
    # iterations 0, 1 and 3 wait in the inbox: every close of the batch reads what its
    # last would (deferral asks all of them), on both backends
    assert [c.waiting for c in closes if c.closed] == [3, 3]
    assert closes[-1].status == "RUNNING"
    assert closes[-1].loop == LoopCounters(done=False, window=10, in_flight=10)
    with store.db.engine.connect() as conn:
        rows = conn.execute(
            select(events.c.iteration, events.c.type, events.c.payload)
            .where(events.c.execution_id == eid, events.c.command_id.is_not(None))
            .order_by(events.c.event_id)
        ).all()
    assert [(r.iteration, r.type, r.payload["result"]) for r in rows] == [
        (0, "command.completed", "zero"),
        (1, "command.completed", {"one": 1, "text": 'a "b" \\ c \u00fc'}),
        (3, "command.failed", None),
    ]
    with store.completion(claimed[1]) as tx:  # closed already: a second close takes none
        assert [c.closed for c in tx.close_many(batch)] == [False, False, False]


def test_the_backlog_reads_the_committed_inbox_per_epoch_with_its_loop_counters(
    store: Store,
) -> None:
    """What a closer that deferred reads once committed (orchestrator.batching)."""
    eid = new_execution(store)
    assert store.backlog(eid) == []
    plan = LoopPlan("each", 1, [{"i": i} for i in range(20)], 0, {"iterator": "x", "total": 20})
    issue = IssueRange("each", 1, 0, 10, 0)
    apply(store, eid, decision(eid, plans=[plan], issues=[issue], loops=[mirror(10, 10, 0)]))
    claimed = [store.claim(f"{eid}:each:1:{i}", "w", 60) for i in range(3)]
    for got in claimed:
        assert got is not None
        with store.completion(got) as tx:
            assert tx.close(Outcome("ok", got.iteration)).closed

    assert store.backlog(eid) == [
        EpochBacklog(status="RUNNING", waiting=3, other=False, done=False, window=10, in_flight=10)
    ]


def test_results_and_contexts_are_immutable_and_cached(store: Store) -> None:
    eid = new_execution(store)
    apply(
        store,
        eid,
        decision(
            eid,
            results=[ResultWrite("start", 1, "ok", {"rows": [1]})],
            contexts={1: {"vars": {"a": 1}, "results": {"start": 1}}},
        ),
    )
    assert store.result(eid, "start", 1) == {"rows": [1]}
    assert store.context(eid, 1) == {"vars": {"a": 1}, "results": {"start": 1}}
    apply(store, eid, decision(eid, results=[ResultWrite("start", 1, "ok", {"rows": [2]})]))
    assert store.result(eid, "start", 1) == {"rows": [1]}


def test_terminal_decision_finishes_the_execution(store: Store) -> None:
    from noetl_celery.orchestrator.decisions import Terminal

    eid = new_execution(store)
    d = decision(eid, terminal=Terminal(ExecutionStatus.FAILED, {"x": 1}, {"message": "boom"}))
    apply(store, eid, d)
    row = store.execution(eid)
    assert row.status == "FAILED" and row.result == {"x": 1} and row.error == {"message": "boom"}
    assert row.finished_at is not None


def test_bookkeeping_commits_async_but_a_terminal_commits_synchronously(pg_url: str) -> None:
    from sqlalchemy import event, text

    from noetl_celery.orchestrator.decisions import Terminal

    database = Database(pg_url)  # default: synchronous_commit off for bookkeeping
    store = Store(database)
    with database.engine.connect() as conn:
        assert conn.execute(text("SHOW synchronous_commit")).scalar() == "off"
    seen: list[str] = []
    event.listen(database.engine, "before_cursor_execute", lambda *args: seen.append(args[2]))
    eid = new_execution(store)
    apply(store, eid, decision(eid, events=[EngineEvent("loop.done", "each", 1, {})]))
    assert not any("synchronous_commit" in s for s in seen)
    apply(store, eid, decision(eid, terminal=Terminal(ExecutionStatus.COMPLETED, None, None)))
    assert sum("SET LOCAL synchronous_commit TO on" in s for s in seen) == 1
    database.dispose()


def test_a_delayed_command_waits_in_the_table_until_the_sweep_issues_it(store: Store) -> None:
    """A claim retried after a backoff: parked (not published, not claimable) until it is
    due, then issued by exactly one release, which publishes it."""
    eid = new_execution(store)
    later = NewCommand(
        f"{eid}:start:1:c0.1:a2", "start", "claim", 1, 0, attempt=2, delay_seconds=3600.0
    )
    soon = replace(later, command_id=f"{eid}:start:1:c1.1:a2", delay_seconds=0.01)
    assert apply(store, eid, decision(eid, commands=[later, soon])) == []  # none published
    assert store.claim(soon.command_id, "w1", 60) is None  # an early message runs nothing
    assert store.command_counts(eid).delayed == 2
    time.sleep(0.05)
    assert store.reaper.release_delayed() == [soon.command_id]  # due: issued, to publish
    assert store.reaper.release_delayed() == []  # once
    claimed = store.claim(soon.command_id, "w1", 60)
    assert claimed is not None and claimed.attempt == 2
    # cancelling the execution cancels the one still waiting: it can never run
    assert store.termination.end_execution(
        eid, ExecutionStatus.CANCELLED, "cancelled by test"
    ).ended
    assert store.command_status(later.command_id) == "cancelled"
