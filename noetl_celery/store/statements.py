"""Hot-path statements, built once with bind parameters.

Building a Core statement per call costs more Python time than the round trip it makes
(cache-key generation over fresh objects): the per-iteration statements of the engine
are therefore module constants, executed with parameter dicts only.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ARRAY, ColumnElement, and_, any_, bindparam, delete, func, select, update

from noetl_celery.constants import CMD_ISSUED, CMD_PLANNED, CMD_RUNNING
from noetl_celery.store.schema import commands, events, executions, inbox, loops

EXECUTION_COLUMNS = (
    executions.c.execution_id,
    executions.c.catalog_id,
    executions.c.path,
    executions.c.status,
    executions.c.parent_execution_id,
    executions.c.parent_command_id,
    executions.c.payload,
    executions.c.state,
    executions.c.result,
    executions.c.error,
    executions.c.created_at,
    executions.c.updated_at,
    executions.c.finished_at,
    executions.c.passes,
    executions.c.spawn_key,
    executions.c.trigger,
    executions.c.rerun_of,
    executions.c.trigger_detail,
)

_by_id = executions.c.execution_id == bindparam("b_eid")


def one_of(column: ColumnElement[Any], name: str, postgres: bool) -> ColumnElement[bool]:
    """`column` is one of the list bound as `name`. On Postgres `= ANY(:name)`: one array
    parameter, so the statement's text is the same however many values (an expanding IN
    renders a placeholder per value on every execution, and past 4 KB of text psycopg
    neither caches its conversion nor prepares it: py-spy on bench.embedded_fanout's
    threads worker, 3.5 % of its CPU in claim_batch alone). SQLite has no arrays."""
    if postgres:
        return column == any_(bindparam(name, type_=ARRAY(column.type)))
    return column.in_(bindparam(name, expanding=True))


# The orchestration lock (SQLite drops FOR UPDATE: its write lock serialises instead).
LOCK_WAIT = select(*EXECUTION_COLUMNS).where(_by_id).with_for_update()
LOCK_TRY = select(*EXECUTION_COLUMNS).where(_by_id).with_for_update(skip_locked=True)

# the inbox (store.schema.inbox): completions no pass has folded yet
_waiting = inbox.c.execution_id == bindparam("b_eid")
INBOX = (
    select(
        events.c.event_id,
        events.c.command_id,
        events.c.step,
        events.c.epoch,
        events.c.iteration,
        events.c.payload,
        events.c.type,
    )
    .select_from(inbox.join(events, events.c.event_id == inbox.c.event_id))
    .where(_waiting)
    .order_by(inbox.c.event_id)
    .limit(bindparam("b_limit"))
)
HAS_UNHANDLED = select(inbox.c.event_id).where(_waiting).limit(1)
WAITING_EPOCH = select(func.count()).where(
    _waiting, inbox.c.step == bindparam("b_step"), inbox.c.epoch == bindparam("b_epoch")
)
WAITING = (
    select(
        inbox.c.step,
        inbox.c.epoch,
        func.count(),
        func.count() - func.count(inbox.c.iteration),
    )
    .where(_waiting)
    .group_by(inbox.c.step, inbox.c.epoch)
)
# the inbox as committed, per epoch (WAITING's columns first), with what deferral reads of
# the epoch's loops row and the execution's status
BACKLOG = (
    WAITING.add_columns(executions.c.status, loops.c.done, loops.c.window_size, loops.c.in_flight)
    .select_from(
        inbox.join(executions, executions.c.execution_id == inbox.c.execution_id).outerjoin(
            loops,
            and_(
                loops.c.execution_id == inbox.c.execution_id,
                loops.c.step == inbox.c.step,
                loops.c.epoch == inbox.c.epoch,
            ),
        )
    )
    .group_by(executions.c.status, loops.c.done, loops.c.window_size, loops.c.in_flight)
)
# by the primary key (execution, event): the inbox's one index (migration 0017)
MARK_HANDLED = delete(inbox).where(_waiting, one_of(inbox.c.event_id, "b_ids", postgres=False))

# what a worker needs to run a command (a claim returns it; the reaper copies it into the
# next attempt)
COMMAND_COLUMNS = (
    commands.c.execution_id,
    commands.c.step,
    commands.c.kind,
    commands.c.epoch,
    commands.c.iteration,
    commands.c.attempt,
    commands.c.ctx_version,
    commands.c.item,
    commands.c.meta,
    commands.c.resume,
)
CLAIM = (
    update(commands)
    .where(commands.c.command_id == bindparam("b_cid"), commands.c.status == CMD_ISSUED)
    .values(
        status=CMD_RUNNING,
        worker=bindparam("b_worker"),
        started_at=bindparam("b_now"),
        lease_until=bindparam("b_lease"),
    )
    .returning(*COMMAND_COLUMNS)
)
CLOSE_COMMAND = (
    update(commands)
    .where(commands.c.command_id == bindparam("b_cid"), commands.c.status == CMD_RUNNING)
    .values(status=bindparam("b_status"), finished_at=bindparam("b_now"))
    .returning(commands.c.command_id)
)
ISSUE_RANGE = (
    update(commands)
    .where(
        commands.c.execution_id == bindparam("b_eid"),
        commands.c.step == bindparam("b_step"),
        commands.c.epoch == bindparam("b_epoch"),
        commands.c.iteration >= bindparam("b_start"),
        commands.c.iteration < bindparam("b_stop"),
        commands.c.status == CMD_PLANNED,
    )
    .values(status=CMD_ISSUED, issued_at=bindparam("b_now"), ctx_version=bindparam("b_ctx"))
    .returning(commands.c.command_id, commands.c.iteration)
)
SAVE_STATE = (
    update(executions)
    .where(_by_id)
    .values(
        state=bindparam("b_state"),
        passes=executions.c.passes + 1,
        updated_at=bindparam("b_now"),
    )
)
# Postgres: the pass's inbox marks ride on its state write (a data-modifying CTE runs to
# completion whether or not the outer statement reads it): one round trip, not two
_folded = one_of(inbox.c.event_id, "b_ids", postgres=True)
SAVE_STATE_HANDLED = SAVE_STATE.add_cte(delete(inbox).where(_waiting, _folded).cte("handled"))
CATALOG_OF = select(executions.c.catalog_id).where(_by_id)
STATUS_OF = select(executions.c.status).where(_by_id)
STATE_OF = select(executions.c.state).where(_by_id)
