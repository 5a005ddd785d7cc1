"""The engine's tables (SQLAlchemy Core). Postgres is the target; SQLite serves the
embedded default. The alembic migrations in `noetl_celery/store/migrations/versions`
create exactly this.

Invariants enforced here rather than in process memory (docs/design.md §2):
- one terminal event per command          -> ux_events_command_terminal
- one `loop.done` per loop epoch          -> ux_events_loop_done
- one terminal event per execution        -> ux_events_execution_terminal
- a quarantined item redriven at most once -> ux_events_item_redriven
- a command exists once per coordinate    -> commands.command_id is deterministic (PK)
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

# Bump together with a new alembic revision; `Database.prepare` compares it.
SCHEMA_REVISION = "0017"

metadata = MetaData()


class JsonType(TypeDecorator[Any]):
    """JSON, stored as JSONB on Postgres. The Postgres type is looked up when a Postgres
    connection first needs it: importing `sqlalchemy.dialects.postgresql` costs a tenth
    of the embedded `run`'s start, which never talks to Postgres (issue 15)."""

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB

            return dialect.type_descriptor(JSONB())
        return dialect.type_descriptor(JSON())


Json = JsonType()
# SQLite only auto-increments an INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> dt.datetime:
    """Naive UTC: timestamps are stored without zone on both dialects and always
    compared against values computed here, never against the server's clock."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _partial(where: str) -> dict[str, Any]:
    """A partial index's options. Its Postgres `WHERE` waits in `info` until
    `for_postgres()` attaches it: a `postgresql_*` option given here would import the
    Postgres dialect with this module, and the embedded default never needs it."""
    clause = text(where)
    return {"sqlite_where": clause, "info": {_PG_WHERE: clause}}


_PG_WHERE = "postgresql_where"
_pg_lock = threading.Lock()
_pg_done = False


def for_postgres() -> MetaData:
    """The tables with their Postgres options attached (the partial indexes' WHERE).
    Called before any use against Postgres (`Database` does, and so does the
    migrations' environment); idempotent and thread-safe."""
    global _pg_done
    with _pg_lock:
        if not _pg_done:
            for table in metadata.tables.values():
                for index in table.indexes:
                    if _PG_WHERE in index.info:
                        index.dialect_options["postgresql"]["where"] = index.info[_PG_WHERE]
            _pg_done = True
    return metadata


catalog = Table(
    "catalog",
    metadata,
    Column("catalog_id", BigId, primary_key=True, autoincrement=True),
    Column("path", String(512), nullable=False),
    Column("version", Integer, nullable=False),
    Column("name", String(256), nullable=False),
    Column("content", Text, nullable=False),
    Column("content_sha256", String(64), nullable=False),
    Column("created_at", DateTime, nullable=False, default=utcnow),
    # `script:` files read at registration, {base_dir, files: {uri: text}}; null when
    # the playbook has none (passes.scripts)
    Column("scripts", Json, nullable=True),
    UniqueConstraint("path", "version", name="uq_catalog_path_version"),
    Index("ix_catalog_path_sha", "path", "content_sha256"),
)

executions = Table(
    "executions",
    metadata,
    Column("execution_id", String(40), primary_key=True),
    Column("catalog_id", BigId, ForeignKey("catalog.catalog_id"), nullable=False),
    Column("path", String(512), nullable=False),
    Column("status", String(16), nullable=False),
    Column("parent_execution_id", String(40), nullable=True),
    Column("parent_command_id", String(512), nullable=True),
    # a child's deterministic identity: <parent command>#<task>#<spawn number>; a parent
    # command that runs again finds its child instead of starting a second one
    Column("spawn_key", String(640), nullable=True),
    Column("payload", Json, nullable=True),
    # the orchestrator's snapshot (small: vars, step status, loop counters, pointers)
    Column("state", Json, nullable=True),
    Column("passes", Integer, nullable=False, default=0),
    Column("result", Json, nullable=True),
    Column("error", Json, nullable=True),
    Column("created_at", DateTime, nullable=False, default=utcnow),
    Column("updated_at", DateTime, nullable=False, default=utcnow),
    Column("finished_at", DateTime, nullable=True),
    # how the run was started: manual | schedule | rerun | parent (constants.TRIGGERS)
    Column("trigger", String(16), nullable=False, server_default="manual"),
    Column("rerun_of", String(40), nullable=True),  # the execution a rerun repeats
    # what the trigger needs remembered: schedule id and fire time, rerun options
    Column("trigger_detail", Json, nullable=True),
    # embedded executions only: the process whose threads run it (`host:pid:boot.start`,
    # see engine.owner); the next embedded start ends those whose process is gone
    Column("owner", String(256), nullable=True),
    Index("ix_executions_status_created", "status", "created_at"),
    Index("ix_executions_parent", "parent_execution_id"),
    Index("ix_executions_created", "created_at"),
    Index("ux_executions_spawn_key", "spawn_key", unique=True),
)

commands = Table(
    "commands",
    metadata,
    # deterministic: <execution>:<step>:<epoch>[:<iteration>][:a<attempt>]
    Column("command_id", String(512), primary_key=True),
    Column("execution_id", String(40), nullable=False),
    Column("step", String(256), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("iteration", Integer, nullable=True),
    Column("attempt", Integer, nullable=False, default=1),
    Column("item", Json, nullable=True),  # the loop item / claimed row of this command
    Column("meta", Json, nullable=True),
    # a waiting command's continuation (the child's terminal adds its summary, issues it)
    Column("resume", Json, nullable=True),
    # a step `spec.timeout` turns into a deadline; the reaper fails a command past it
    Column("deadline_at", DateTime, nullable=True),
    # times the reaper published an `issued` command again; each wait doubles (a long
    # broker backlog must not turn into a storm of duplicates)
    Column("republished", Integer, nullable=False, server_default="0"),
    # what issue, claim and close write comes last (0017): see the index's comment
    Column("ctx_version", Integer, nullable=False),
    Column("worker", String(256), nullable=True),
    Column("lease_until", DateTime, nullable=True),
    # when it was issued; for a `delayed` command, when it is due (the reaper issues it)
    Column("issued_at", DateTime, nullable=True),
    Column("started_at", DateTime, nullable=True),
    Column("finished_at", DateTime, nullable=True),
    # planned -> issued -> running [-> waiting -> issued -> running] -> completed | failed
    # | cancelled; a claim retried after a backoff is inserted `delayed` -> issued -> ...;
    # a pipeline waiting out a long retry delay goes running -> delayed -> issued -> ...
    Column("status", String(16), nullable=False),
    # No index on `status`: claim and close update the row in place (HOT, fillfactor 70),
    # logging only the bytes from the first to the last changed (hence the column order,
    # migration 0017); the reaper finds commands per execution through this index.
    Index("ix_commands_execution_step", "execution_id", "step", "epoch", "iteration"),
)

events = Table(
    "events",
    metadata,
    Column("event_id", BigId, primary_key=True, autoincrement=True),
    Column("execution_id", String(40), nullable=False),
    Column("type", String(64), nullable=False),
    Column("step", String(256), nullable=True),
    Column("command_id", String(512), nullable=True),
    Column("epoch", Integer, nullable=True),
    Column("iteration", Integer, nullable=True),
    Column("payload", Json, nullable=True),
    Column("created_at", DateTime, nullable=False, default=utcnow),
    Index("ix_events_execution", "execution_id", "event_id"),
    Index(
        "ux_events_command_terminal",
        "command_id",
        unique=True,
        **_partial("type IN ('command.completed', 'command.failed')"),
    ),
    Index(
        "ux_events_loop_done",
        "execution_id",
        "step",
        "epoch",
        unique=True,
        **_partial("type = 'loop.done'"),
    ),
    Index(
        "ux_events_execution_terminal",
        "execution_id",
        unique=True,
        **_partial("type IN ('execution.completed', 'execution.failed', 'execution.cancelled')"),
    ),
    # per-item results of a loop epoch, read once when the epoch finishes
    Index(
        "ix_events_iterations",
        "execution_id",
        "step",
        "epoch",
        "iteration",
        **_partial("iteration IS NOT NULL"),
    ),
    # failed loop iterations only: paged and counted without touching the successful ones
    Index(
        "ix_events_failed_iterations",
        "execution_id",
        "step",
        "epoch",
        "iteration",
        **_partial("type = 'command.failed' AND iteration IS NOT NULL"),
    ),
    # one `item.quarantined` per loop item (migration 0015): the quarantine's list, and
    # what the failed-items reads skip
    Index(
        "ux_events_item_quarantined",
        "execution_id",
        "step",
        "epoch",
        "iteration",
        unique=True,
        **_partial("type = 'item.quarantined'"),
    ),
    # one `item.redriven` per quarantined item (migration 0015): none is redriven twice
    Index(
        "ux_events_item_redriven",
        "execution_id",
        "step",
        "epoch",
        "iteration",
        unique=True,
        **_partial("type = 'item.redriven'"),
    ),
    # each deadline event at most once per execution (engine.deadlines)
    Index(
        "ux_events_deadline",
        "execution_id",
        "type",
        unique=True,
        **_partial("type IN ('deadline.at_risk', 'deadline.missed')"),
    ),
)

# The inbox: one row per command completion not yet folded into its execution's state.
# The completion inserts it with the event; the orchestration pass that folds it deletes
# it in the same transaction (cheaper than updating the event row: no index is rewritten).
# Its primary key (execution, event) is its one index: passes read and delete by it (0017).
inbox = Table(
    "inbox",
    metadata,
    Column("execution_id", String(40), primary_key=True),
    Column("event_id", BigId, primary_key=True, autoincrement=False),
    Column("step", String(256), nullable=True),
    Column("epoch", Integer, nullable=True),
    Column("iteration", Integer, nullable=True),
)

# A step's result per epoch. Immutable once written, so workers and the orchestrator
# cache them by (execution, step, epoch) for good.
results = Table(
    "results",
    metadata,
    Column("execution_id", String(40), primary_key=True),
    Column("step", String(256), primary_key=True),
    Column("epoch", Integer, primary_key=True),
    Column("status", String(16), nullable=False),
    Column("data", Json, nullable=True),
    Column("created_at", DateTime, nullable=False, default=utcnow),
)

# The render context of commands: the variables as of a version of the execution's
# state plus pointers to step results. Written once per version that issued commands.
contexts = Table(
    "contexts",
    metadata,
    Column("execution_id", String(40), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("data", Json, nullable=False),
    Column("created_at", DateTime, nullable=False, default=utcnow),
)

# Loop progress per epoch, mirrored from the orchestrator's state for operators.
loops = Table(
    "loops",
    metadata,
    Column("execution_id", String(40), primary_key=True),
    Column("step", String(256), primary_key=True),
    Column("epoch", Integer, primary_key=True),
    Column("mode", String(16), nullable=False),
    Column("total", Integer, nullable=True),
    Column("issued", Integer, nullable=False, default=0),
    Column("succeeded", Integer, nullable=False, default=0),
    Column("failed", Integer, nullable=False, default=0),
    Column("done", Boolean, nullable=False, default=False),
    Column("updated_at", DateTime, nullable=False, default=utcnow),
    # when the epoch's row was first written (its start); null for epochs recorded before
    # migration 0008. Never updated: the upsert leaves it out of its SET list.
    Column("started_at", DateTime, nullable=True),
    # what a worker's close reads to decide whether its completion may wait for a later
    # pass (worker.execute): the epoch's window and commands in flight, written by every
    # pass that changes them (0 for epochs recorded before migration 0011: never deferred)
    Column("window_size", Integer, nullable=False, server_default="0"),
    Column("in_flight", Integer, nullable=False, server_default="0"),
    # items set aside by a quarantine (neither succeeded nor failed; migration 0015)
    Column("quarantined", Integer, nullable=False, server_default="0"),
)

# Leases of single-instance duties (the reaper): a row per duty, held by `owner` until
# `expires_at`; taken over only once it has expired.
leases = Table(
    "leases",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("owner", String(256), nullable=False),
    Column("expires_at", DateTime, nullable=False),
)

# The http tool's pacing schedule of the fleet (store.pacing, tools.http_pacing): a row per
# host that answered 429 (or has a declared rate), booked by every worker process. Times
# are the database clock's epoch seconds, so workers on several machines agree on them.
http_pace = Table(
    "http_pace",
    metadata,
    Column("host", String(300), primary_key=True),
    Column("rate", Float, nullable=True),  # requests per second; NULL: not paced
    Column("ceiling", Float, nullable=True),  # declared (NOETL_HTTP_RATE_LIMITS)
    Column("tat", Float, nullable=False, server_default="0"),  # the next free send slot
    Column("paused_until", Float, nullable=False, server_default="0"),  # Retry-After
    Column("last_cut", Float, nullable=False, server_default="0"),
    Column("last_raise", Float, nullable=False, server_default="0"),
    Column("slack_at", Float, nullable=False, server_default="0"),  # a slot went unused
    # the overshoot a cut answers: when, the requests counted, the rate before it
    Column("epoch_at", Float, nullable=False, server_default="0"),
    Column("epoch_count", Float, nullable=False, server_default="0"),
    Column("rate_before", Float, nullable=True),
    # slots booked in the current second and the one before (the fleet's send rate)
    Column("bucket_at", Float, nullable=False, server_default="0"),
    Column("bucket_n", Integer, nullable=False, server_default="0"),
    Column("prev_n", Integer, nullable=False, server_default="0"),
    # a keyed rate_limit's estimate of its real limit from its last 429 (migration 0016)
    Column("learned", Float, nullable=True),
)

# The run slots of keyed `rate_limit.concurrency` (store.throttle, worker.throttle; 0016):
# a row per slot held, `slot_no` below the key's cap, so the primary key bounds how many
# bodies of a key run at once. A slot is its command's while that command is `running`
# with a live lease: a worker killed while holding one frees it when the lease lapses.
throttle_slots = Table(
    "throttle_slots",
    metadata,
    Column("key", String(300), primary_key=True),
    Column("slot_no", Integer, primary_key=True),
    Column("command_id", String(512), nullable=False),
    Column("acquired_at", DateTime, nullable=False),
    Index("ix_throttle_slots_command", "command_id"),
)

# Messages the broker could not take (engine.outbox): a row per command whose publish
# failed, or per execution whose wake-up did; written only on that failure path, never
# per command. Every worker process's relay polls it (it is almost always empty), claims
# rows for `claimed_until`, publishes those whose command is still `issued` and deletes
# them.
publish_outbox = Table(
    "publish_outbox",
    metadata,
    Column("item_id", String(512), primary_key=True),  # a command id, or an execution id
    Column("kind", String(16), nullable=False),  # 'command' or 'wake'
    Column("execution_id", String(40), nullable=False),
    Column("held_at", DateTime, nullable=False),
    Column("claimed_until", DateTime, nullable=True),
)

# The notification outbox (engine.notify): a row per (execution, event, target), written
# in the transaction that ends the execution (or records its deadline event); the
# workers' deliverers claim due rows (`claimed_until`), POST them, and record the try.
notifications = Table(
    "notifications",
    metadata,
    Column("notification_id", String(700), primary_key=True),  # models.notify.notification_id
    Column("execution_id", String(40), nullable=False),
    Column("event", String(32), nullable=False),  # a terminal status or deadline.*
    Column("target", String(16), nullable=False),  # 'engine' or 'playbook'
    Column("created_at", DateTime, nullable=False),
    Column("next_at", DateTime, nullable=False),  # due (the backoff after a failure)
    Column("claimed_until", DateTime, nullable=True),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("last_error", Text, nullable=True),
    Column("delivered_at", DateTime, nullable=True),
    # done without a POST: the engine-wide target's deliverers do not want its event
    Column("skipped", Boolean, nullable=False, server_default=text("false")),
    Index("ix_notifications_due", "next_at", **_partial("delivered_at IS NULL")),
    Index("ix_notifications_execution", "execution_id"),
)

# Engine-wide counters (store.counters): what the reaper did, for `/metrics`.
counters = Table(
    "counters",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", BigInteger, nullable=False),
)

# Cron schedules (`noetl-celery schedule add`, or `metadata.schedule` installed by
# `catalog register`, named `catalog:<path>`). `next_fire_at` is naive UTC.
schedules = Table(
    "schedules",
    metadata,
    Column("schedule_id", BigId, primary_key=True, autoincrement=True),
    Column("name", String(600), nullable=True),
    Column("path", String(512), nullable=False),
    Column("cron", String(256), nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("payload", Json, nullable=True),
    Column("enabled", Boolean, nullable=False),
    Column("next_fire_at", DateTime, nullable=False),
    Column("last_fire_at", DateTime, nullable=True),
    Column("created_at", DateTime, nullable=False, default=utcnow),
    # its runs' deadline (models.deadlines): "2h", or "06:00" in `timezone`
    Column("deadline", String(32), nullable=True),
    Index("ux_schedules_name", "name", unique=True),
    Index("ix_schedules_due", "enabled", "next_fire_at"),
)

# One row per firing: the primary key (schedule, fire time) is the idempotency key that
# lets any number of beat processes and workers try, and exactly one start the run.
schedule_firings = Table(
    "schedule_firings",
    metadata,
    Column("schedule_id", BigId, primary_key=True),
    Column("fire_time", DateTime, primary_key=True),
    Column("execution_id", String(40), nullable=True),
    Column("created_at", DateTime, nullable=False, default=utcnow),
)

# Rows each cursor epoch has claimed, by content. A worker that dies between recording a
# claim and committing it leaves its rows pending in the queue; the next frame claims
# them again and this table (its primary key) drops them, so no row runs or counts twice.
cursor_rows = Table(
    "cursor_rows",
    metadata,
    Column("execution_id", String(40), primary_key=True),
    Column("step", String(256), primary_key=True),
    Column("epoch", Integer, primary_key=True),
    Column("row_key", String(64), primary_key=True),
)

# Facts about the database itself; `database_id` (written by migration 0006) identifies
# it, so a worker can refuse messages minted against another database.
engine_info = Table(
    "engine_info",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
    Column("created_at", DateTime, nullable=False, default=utcnow),
)

# What a command printed or logged (python `print`, `logging`, the engine's own lines
# about it), captured on the worker, redacted and capped per command; rows without a
# command are the engine's lines about the execution itself.
command_logs = Table(
    "command_logs",
    metadata,
    Column("log_id", BigId, primary_key=True, autoincrement=True),
    Column("execution_id", String(40), nullable=False),
    Column("command_id", String(512), nullable=True),
    Column("step", String(256), nullable=True),
    Column("iteration", Integer, nullable=True),
    Column("text", Text, nullable=False),
    Column("truncated", Boolean, nullable=False),
    Column("created_at", DateTime, nullable=False, default=utcnow),
    Index("ix_command_logs_execution", "execution_id", "log_id"),
)
