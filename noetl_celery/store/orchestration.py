"""The orchestration transaction: lock one execution, read its inbox, persist a decision.

Everything a pass writes (commands, results, contexts, engine events, the handled marks
of the inbox and the new state) commits together; the command ids it returns are the
ones *this* transaction inserted or issued, and only those get published, after commit.
The transaction holds its connection and the locked row, not the Store: its statements
are the named queries of store.queries.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection

from noetl_celery import tracing
from noetl_celery.orchestrator.decisions import (
    Completion,
    Decision,
    IssueRange,
    LoopPlan,
    Terminal,
)
from noetl_celery.orchestrator.ids import iteration_command_id, parse_claim
from noetl_celery.store import queries
from noetl_celery.store.children import resume_parent
from noetl_celery.store.database import after_commit
from noetl_celery.store.notifications import NotificationsManager
from noetl_celery.store.queries import ResultCache
from noetl_celery.store.queries import tracing as trace_queries
from noetl_celery.store.rows import ClaimedCommand, ExecutionRow
from noetl_celery.store.schema import utcnow
from noetl_celery.store.statements import COMMAND_COLUMNS


def claim_in(
    conn: Connection, command_id: str, execution_id: str, catalog_id: int, worker: str, lease: int
) -> ClaimedCommand | None:
    """The conditional claim a delivery makes, in the caller's transaction, of a command
    of `execution_id` (worker.execute's local continuation: a command a pass just
    issued, claimed by the process that will run it next, committed with that pass)."""
    now = utcnow()
    row = queries.claim(conn, command_id, worker, now, now + dt.timedelta(seconds=lease))
    if row is None or row.execution_id != execution_id:
        return None
    return ClaimedCommand(command_id=command_id, catalog_id=catalog_id, **row._mapping)


def claimed_command(row: Any, catalog_id: int) -> ClaimedCommand:
    """A row of COMMAND_COLUMNS (and its command_id) as the command a claim returns."""
    fields = {c.name: row._mapping[c.name] for c in COMMAND_COLUMNS}
    return ClaimedCommand(command_id=row.command_id, catalog_id=catalog_id, **fields)


@dataclass(frozen=True)
class Follow:
    """Asked of a pass by the process that closed a command (worker.execute's local
    continuation): claim for it, in the pass's own writes, the command `pick` chooses
    among the ones the pass issues (None: none), to run next in that process."""

    pick: Callable[[list[str]], str | None]
    worker: str
    lease_seconds: int


class OrchestrationTx:
    def __init__(
        self,
        conn: Connection,
        execution: ExecutionRow,
        results: ResultCache,
        inbox: list[Completion] | None = None,
        notify: NotificationsManager | None = None,
    ) -> None:
        """`inbox`: the inbox as the statement that took the lock read it (every entry,
        in order), for the pass's first read."""
        self.conn = conn
        self.execution = execution
        self.execution_id = execution.execution_id
        self._results = results
        self._inbox = inbox
        self._notify = notify  # the terminal write's notifications (store.notifications)
        self.follow: Follow | None = None  # set before the pass, when asked
        self.followed: ClaimedCommand | None = None  # what the pass claimed for it

    # ---- Facts (read-only history) ----------------------------------------------------------
    def result(self, step: str, epoch: int) -> Any:
        return queries.cached_result(self.conn, self._results, self.execution_id, step, epoch)

    def iteration_results(self, step: str, epoch: int, limit: int) -> list[Any]:
        return queries.iteration_results(self.conn, self.execution_id, step, epoch, limit)

    # ---- inbox ------------------------------------------------------------------------------
    def inbox(self, limit: int) -> list[Completion]:
        read, self._inbox = self._inbox, None
        if read is not None:
            return read[:limit]
        return queries.inbox_completions(self.conn, self.execution_id, limit)

    def first_claims(self, completions: list[Completion]) -> list[Completion]:
        """Cursor claims keep only rows their epoch has not claimed before (a claim that
        was recorded but not committed put its rows back in the queue; see
        schema.cursor_rows). Rows are told apart by content: claim SQL should return
        the row's key."""
        out = []
        for completion in completions:
            rows = claimed_rows(completion)
            if rows:
                fresh = self._fresh(completion, rows)
                if len(fresh) != len(rows):
                    result = {**completion.outcome.result, "rows": fresh}
                    result["row_count"] = len(fresh)
                    result["duplicates"] = len(rows) - len(fresh)
                    completion = replace(
                        completion, outcome=replace(completion.outcome, result=result)
                    )
            out.append(completion)
        return out

    def _fresh(self, completion: Completion, rows: list[Any]) -> list[Any]:
        keyed = keyed_rows(rows)
        fresh = queries.first_claimed_keys(
            self.conn, self.execution_id, completion.step, completion.epoch, keyed
        )
        return [row for key, row in keyed.items() if key in fresh]

    def waiting(self) -> list[tuple[str, int, int, bool]]:
        """The inbox grouped by (step, epoch): count, and whether any entry is not a loop
        iteration (the inbox is small: it holds only what no pass folded yet). Counted
        from the inbox the lock's statement read, while the pass has not read it."""
        if self._inbox is None:
            return queries.waiting(self.conn, self.execution_id)
        groups: dict[tuple[str, int], list[Any]] = {}
        for completion in self._inbox:
            group = groups.setdefault((completion.step, completion.epoch), [0, False])
            group[0] += 1
            group[1] = group[1] or completion.iteration is None
        return [(step, epoch, n, other) for (step, epoch), (n, other) in groups.items()]

    def mark_handled(self, event_ids: Sequence[int]) -> None:
        queries.mark_handled(self.conn, self.execution_id, event_ids)

    # ---- persisting a decision --------------------------------------------------------------
    def apply(self, decision: Decision, handled: Sequence[int]) -> list[str]:
        """Write the decision; return the command ids to publish after commit. One helper
        per kind of row; the order is the one every pass used (the terminal write last)."""
        now = utcnow()
        self._write_results(decision, now)
        self._write_contexts(decision, now)
        whole = self._whole_plans(decision)
        if whole is not None:
            return self._issue_and_save(decision, whole, handled, now)
        issued, done = self._write_plans(decision, now)
        publish = self._write_commands(decision, now) + issued
        publish += self._issue_ranges(decision, now, done)
        self._write_events(decision, now)
        self._write_loops(decision, now)
        if decision.terminal is None:
            state = decision.state.to_json()
            queries.save_state(self.conn, self.execution_id, state, now, handled)
        else:
            self.mark_handled(handled)
            publish += self._end(decision, decision.terminal, now)
        if self.follow is not None and decision.terminal is None:
            # (a terminal pass may resume a parent's command: never this process's to run)
            self._claim_follow(publish)
        return publish

    def _whole_plans(self, decision: Decision) -> list[tuple[LoopPlan, IssueRange]] | None:
        """On Postgres, for a pass that does not end the execution and issues nothing
        but new commands and loop plans issued whole (a cursor lane's pass, a small
        loop's start): those plans, each with the issue that issues it. None: write the
        decision statement by statement."""
        if decision.terminal is not None or self.conn.dialect.name != "postgresql":
            return None
        whole: list[tuple[LoopPlan, IssueRange]] = []
        positions = set()
        for plan in decision.plans:
            position = issued_whole(plan, decision.issues)
            if position is None or position in positions:
                return None
            positions.add(position)
            whole.append((plan, decision.issues[position]))
        return whole if len(positions) == len(decision.issues) else None

    def _issue_and_save(
        self,
        decision: Decision,
        whole: list[tuple[LoopPlan, IssueRange]],
        handled: Sequence[int],
        now: dt.datetime,
    ) -> list[str]:
        """apply() with the commands, the inbox marks and the state in one statement
        (the follow claimed in it), after the engine events and loop mirrors if any."""
        self._write_events(decision, now)
        self._write_loops(decision, now)
        plan_ids = [
            [
                iteration_command_id(self.execution_id, plan.step, plan.epoch, i)
                for i in range(plan.start, plan.start + len(plan.items))
            ]
            for plan, _ in whole
        ]
        due = [c.command_id for c in decision.commands if c.delay_seconds <= 0]
        due += [cid for ids in plan_ids for cid in ids]
        follow = None
        pick = self.follow.pick(due) if self.follow is not None and due else None
        if self.follow is not None and pick is not None:
            lease = now + dt.timedelta(seconds=self.follow.lease_seconds)
            follow = (pick, self.follow.worker, lease)
        inserted, claimed = queries.issue_and_save(
            self.conn,
            self.execution_id,
            decision.commands,
            [(plan, issue.ctx_version) for plan, issue in whole],
            decision.state.to_json(),
            handled,
            now,
            follow,
        )
        if claimed is not None:
            self.followed = claimed_command(claimed, self.execution.catalog_id)
        delayed = {c.command_id for c in decision.commands if c.delay_seconds > 0}
        publish = [cid for cid in inserted if cid not in delayed]
        for (_, issue), ids in zip(whole, plan_ids, strict=True):
            if not set(ids) <= set(inserted):
                # rows of it were there already (planned by an earlier pass): issue those
                # (never one inserted issued here: the UPDATE takes planned rows only)
                publish += queries.issue_range(self.conn, self.execution_id, issue, now)
        return publish

    def _claim_follow(self, publish: list[str]) -> None:
        """The follow asked for, claimed among the commands this pass issued (the
        statement-by-statement path: a claim of its own)."""
        assert self.follow is not None
        pick = self.follow.pick(publish) if publish else None
        if pick is None:
            return
        self.followed = claim_in(
            self.conn,
            pick,
            self.execution_id,
            self.execution.catalog_id,
            self.follow.worker,
            self.follow.lease_seconds,
        )

    def _write_results(self, decision: Decision, now: dt.datetime) -> None:
        if decision.results:
            queries.insert_results(self.conn, self.execution_id, decision.results, now)

    def _write_contexts(self, decision: Decision, now: dt.datetime) -> None:
        if decision.contexts:
            queries.insert_contexts(self.conn, self.execution_id, decision.contexts, now)

    def _write_plans(self, decision: Decision, now: dt.datetime) -> tuple[list[str], set[int]]:
        """Planned (not yet issued) iteration commands of the loops this pass started. A
        plan the same pass issues whole is inserted issued: the ids it inserted (to
        publish), and the positions in `decision.issues` that need no UPDATE then."""
        issued: list[str] = []
        done: set[int] = set()
        for plan in decision.plans:
            whole = issued_whole(plan, decision.issues)
            if whole is None:
                queries.insert_planned(self.conn, self.execution_id, plan)
                continue
            ctx_version = decision.issues[whole].ctx_version
            ids = queries.insert_issued(self.conn, self.execution_id, plan, ctx_version, now)
            issued += ids
            if len(ids) == len(plan.items):
                done.add(whole)
            # else rows of it were there already (planned, perhaps): the UPDATE issues
            # those; it never returns a row inserted issued here, so none is published twice
        return issued, done

    def _write_commands(self, decision: Decision, now: dt.datetime) -> list[str]:
        """Insert the decision's commands; the ids this transaction inserted and that are
        due now are the ones to publish (a delayed one waits for the reaper's sweep)."""
        if not decision.commands:
            return []
        inserted = queries.insert_commands(self.conn, self.execution_id, decision.commands, now)
        delayed = {c.command_id for c in decision.commands if c.delay_seconds > 0}
        return [cid for cid in inserted if cid not in delayed]

    def _issue_ranges(self, decision: Decision, now: dt.datetime, done: set[int]) -> list[str]:
        """Issue planned iterations (but the plans inserted issued, `done`); the ids this
        transaction issued are published."""
        publish: list[str] = []
        for position, issue in enumerate(decision.issues):
            if position not in done:
                publish += queries.issue_range(self.conn, self.execution_id, issue, now)
        return publish

    def _write_events(self, decision: Decision, now: dt.datetime) -> None:
        if decision.events:
            queries.insert_events(self.conn, self.execution_id, decision.events, now)

    def _write_loops(self, decision: Decision, now: dt.datetime) -> None:
        """The loops table mirrors each loop's counters (what reads and the reaper see)."""
        for mirror in decision.loops:
            queries.upsert_loop(self.conn, self.execution_id, mirror, now)

    def _end(self, decision: Decision, terminal: Terminal, now: dt.datetime) -> list[str]:
        """The terminal write; a child's end also resumes its parent's waiting command,
        atomically (returned to publish)."""
        state = decision.state.to_json()
        queries.end_execution_row(self.conn, self.execution_id, terminal, state, now)
        trace_end(self.conn, self.execution, str(terminal.status), now)
        if self._notify is not None:
            row = self.execution
            self._notify.enqueue_in(
                self.conn,
                self.execution_id,
                row.catalog_id,
                row.parent_execution_id,
                str(terminal.status).lower(),
                now,
            )
        if not self.execution.parent_command_id:
            return []
        ended = replace(
            self.execution,
            status=terminal.status,
            result=terminal.result,
            error=terminal.error,
            state=state,
        )
        parent = resume_parent(self.conn, ended, self._results)
        return [] if parent is None else [parent]


def trace_end(conn: Connection, row: ExecutionRow, status: str, now: dt.datetime) -> None:
    """With tracing on: export the execution's span and its steps' once the transaction
    that ends it committed (exactly once: only one transaction ends an execution). The
    steps' times are read here, in that transaction."""
    if not tracing.enabled():
        return
    times = tracing.ExecutionTimes(
        execution_id=row.execution_id,
        path=row.path,
        status=status,
        started=row.created_at,
        ended=now,
        parent_execution_id=row.parent_execution_id,
        steps=trace_queries.step_times(conn, row.execution_id, now),
    )
    after_commit(conn, lambda: tracing.ended(times))


def issued_whole(plan: LoopPlan, issues: Sequence[IssueRange]) -> int | None:
    """The position of the issue that issues all of `plan` (small plans only: one
    statement), if the decision has one."""
    stop = plan.start + len(plan.items)
    if not plan.items or len(plan.items) > queries.PLAN_CHUNK:
        return None
    for position, issue in enumerate(issues):
        same = (issue.step, issue.epoch, issue.start, issue.stop)
        if same == (plan.step, plan.epoch, plan.start, stop):
            return position
    return None


# json.dumps(row, sort_keys=True, default=str) builds this very encoder on every call
# (non-default options): one shared encoder gives the same text, byte for byte, so the
# keys already written stay the keys, at half the CPU (a frame keys its 50 rows)
_KEY_TEXT = json.JSONEncoder(sort_keys=True, default=str).encode


def row_key(row: Any) -> str:
    return hashlib.sha256(_KEY_TEXT(row).encode()).hexdigest()


def keyed_rows(rows: list[Any]) -> dict[str, Any]:
    """Claimed rows by key, in claim order; a row a claim returned twice, once."""
    keyed: dict[str, Any] = {}
    for row in rows:
        keyed.setdefault(row_key(row), row)
    return keyed


def claimed_rows(completion: Completion) -> list[Any]:
    """The rows a cursor claim's completion carries that its epoch may have claimed
    before (none for anything else, nor for rows the worker recorded as first claims
    itself: `recorded`, worker.frames)."""
    if parse_claim(completion.command_id) is None or not completion.ok:
        return []
    result = completion.outcome.result
    if not isinstance(result, dict) or result.get("recorded"):
        return []
    rows = result.get("rows")
    return rows if isinstance(rows, list) else []
