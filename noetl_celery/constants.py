"""Names shared by every layer: statuses, event types, queues, task names."""

from __future__ import annotations

from enum import StrEnum
from typing import Final

# --- statuses -------------------------------------------------------------------------
# StrEnums: a member is the str it was before (equal to it, hashed like it, stored and
# serialised as it), so stored values and JSON stay the same. Compare statuses with these,
# never with a bare string (tests/unit/test_status_literals.py enforces it).


class ExecutionStatus(StrEnum):
    """executions.status, the CLI's `status`, ExecutionState.status."""

    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class StepStatus(StrEnum):
    """A step's status in the orchestrator's state (StepState.status)."""

    NOT_STARTED = ""  # never entered
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"  # reached with a false step-level `when`: not run


class CommandStatus(StrEnum):
    """commands.status."""

    # a loop iteration inserted with its epoch, issued when the window reaches it
    PLANNED = "planned"
    # parked until its due time (`issued_at`), then issued and published by the reaper's
    # sweep: a cursor claim retried after a backoff, a pipeline waiting out a long retry
    # delay (worker.parking)
    DELAYED = "delayed"
    ISSUED = "issued"  # inserted, message published (or about to be)
    RUNNING = "running"  # claimed by a worker, lease running
    WAITING = "waiting"  # parked until the sub-playbook it started ends
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"  # a run whose worker was lost; its next attempt replaces it


class ReportStatus(StrEnum):
    """What one delivery of a command did, as the Celery task reports it (worker.reports)."""

    COMPLETED = "completed"
    FAILED = "failed"
    WAITING = "waiting"
    DUPLICATE = "duplicate"
    SUPERSEDED = "superseded"


# the names the code has always used
RUNNING: Final = ExecutionStatus.RUNNING
COMPLETED: Final = ExecutionStatus.COMPLETED
FAILED: Final = ExecutionStatus.FAILED
CANCELLED: Final = ExecutionStatus.CANCELLED
TERMINAL_STATUSES: Final = frozenset({COMPLETED, FAILED, CANCELLED})

# --- how an execution was started (executions.trigger) ---------------------------------
TRIGGER_MANUAL: Final = "manual"  # run / submit / the Python API
TRIGGER_SCHEDULE: Final = "schedule"  # a cron firing
TRIGGER_RERUN: Final = "rerun"  # `rerun ID`: repeats another execution
TRIGGER_PARENT: Final = "parent"  # a sub-playbook started by a parent execution
TRIGGERS: Final = frozenset({TRIGGER_MANUAL, TRIGGER_SCHEDULE, TRIGGER_RERUN, TRIGGER_PARENT})

# --- command status (commands.status) -------------------------------------------------
CMD_PLANNED: Final = CommandStatus.PLANNED
CMD_DELAYED: Final = CommandStatus.DELAYED
CMD_ISSUED: Final = CommandStatus.ISSUED
CMD_RUNNING: Final = CommandStatus.RUNNING
CMD_WAITING: Final = CommandStatus.WAITING
CMD_COMPLETED: Final = CommandStatus.COMPLETED
CMD_FAILED: Final = CommandStatus.FAILED
CMD_CANCELLED: Final = CommandStatus.CANCELLED
CMD_EXPIRED: Final = CommandStatus.EXPIRED
CMD_TERMINAL: Final = frozenset({CMD_COMPLETED, CMD_FAILED, CMD_CANCELLED, CMD_EXPIRED})

# --- command kinds ------------------------------------------------------------------------
KIND_STEP: Final = "step"  # one run of a non-loop step (single tool or pipeline)
KIND_ITERATION: Final = "iteration"  # one item of a loop.in epoch, one row of a cursor
KIND_CLAIM: Final = "claim"  # a cursor lane claiming a frame of rows

# --- event types (events.type) -------------------------------------------------------------
EV_EXECUTION_STARTED: Final = "execution.started"
EV_COMMAND_COMPLETED: Final = "command.completed"
EV_COMMAND_FAILED: Final = "command.failed"
EV_LOOP_DONE: Final = "loop.done"
EV_STEP_FAILED: Final = "step.failed"  # an unhandled step failure, recorded once per epoch
# a step reached whose step-level `when` (enable guard) was false: it did not run
EV_STEP_SKIPPED: Final = "step.skipped"
EV_EXECUTION_COMPLETED: Final = "execution.completed"
EV_EXECUTION_FAILED: Final = "execution.failed"
EV_EXECUTION_CANCELLED: Final = "execution.cancelled"
# an orchestration pass of the execution crashed (not the database being away): recorded
# so that repeated crashes end the execution FAILED instead of leaving it RUNNING
EV_PASS_FAILED: Final = "pass.failed"
# rows a cursor step had claimed from the user's queue and not processed when its
# execution was ended from outside (cancel, execution timeout): one per step
EV_CURSOR_UNFINISHED: Final = "cursor.unfinished"
# a failed loop item the orchestrator set aside (a `do: quarantine` policy, the loop's
# `on_item_error: quarantine`): one per item, with its command, and its error in the
# payload. `noetl-celery quarantine` reads these; the failed-items reads skip them.
EV_ITEM_QUARANTINED: Final = "item.quarantined"
# a quarantined item a redrive runs again (in the original execution, written with the
# redrive's execution row): at most one per item, so no item is redriven twice
EV_ITEM_REDRIVEN: Final = "item.redriven"
# a loop item that parked for its rate_limit key's turn (worker.throttle), once per item
# run: in the inbox, it gives the item's slot of its loop's window back (the pass refills
# the window with other items, orchestrator.loops.on_parked); payload {key, delay}
EV_ITEM_THROTTLED: Final = "item.throttled"
COMMAND_TERMINAL_EVENTS: Final = frozenset({EV_COMMAND_COMPLETED, EV_COMMAND_FAILED})
EXECUTION_TERMINAL_EVENTS: Final = frozenset(
    {EV_EXECUTION_COMPLETED, EV_EXECUTION_FAILED, EV_EXECUTION_CANCELLED}
)
EVENT_TYPES: Final = frozenset(
    {
        EV_EXECUTION_STARTED,
        EV_LOOP_DONE,
        EV_STEP_FAILED,
        EV_STEP_SKIPPED,
        EV_PASS_FAILED,
        EV_CURSOR_UNFINISHED,
        EV_ITEM_QUARANTINED,
        EV_ITEM_REDRIVEN,
        EV_ITEM_THROTTLED,
    }
    | COMMAND_TERMINAL_EVENTS
    | EXECUTION_TERMINAL_EVENTS
)
# what `events --failed` shows
FAILURE_EVENTS: Final = frozenset(
    {EV_COMMAND_FAILED, EV_STEP_FAILED, EV_PASS_FAILED, EV_EXECUTION_FAILED}
)

# --- routing event names seen by arc guards as `event.name` ---------------------------------
CALL_DONE: Final = "call.done"
CALL_ERROR: Final = "call.error"
LOOP_DONE: Final = "loop.done"

# --- Celery ----------------------------------------------------------------------------------
QUEUE_COMMANDS: Final = "noetl.commands"
QUEUE_ORCHESTRATE: Final = "noetl.orchestrate"
TASK_EXECUTE_COMMAND: Final = "noetl.execute_command"
# one message carrying many command ids (worker.batch); a single id still goes as
# `execute_command`, which old messages and the reaper's single republish use
TASK_EXECUTE_COMMANDS: Final = "noetl.execute_commands"
TASK_ORCHESTRATE: Final = "noetl.orchestrate"
TASK_REAP: Final = "noetl.reap"
TASK_FIRE_SCHEDULES: Final = "noetl.fire_schedules"
TASK_PRUNE: Final = "noetl.prune"
# how often beat sends the prune task when NOETL_RETENTION is set (engine.retention: the
# prune itself runs at most once a day, whatever the number of beats)
RETENTION_CHECK_SECONDS: Final = 600.0
# rows of one table a prune's delete transaction removes at most (`db prune --chunk-rows`;
# bench/retention.py measures what a chunk costs; docs/operations/retention.md)
ROW_CHUNK: Final = 1000

# --- DSL ---------------------------------------------------------------------------------------
API_VERSIONS: Final = frozenset({"noetl.io/v2", "noetl.io/v10"})
PIPELINE_STATUS_OK: Final = "ok"
PIPELINE_STATUS_BREAK: Final = "break"
PIPELINE_STATUS_FAILED: Final = "failed"
# a `do: quarantine` policy stopped the pipeline: it failed (its result's status reads
# `failed`), its outcome's meta says `quarantine`
PIPELINE_STATUS_QUARANTINED: Final = "quarantined"

# Tool kinds the engine runs. `workbook` and `playbook` are resolved by the runner and the
# engine; the rest are `noetl_celery.tools` implementations.
TOOL_KINDS: Final = frozenset(
    {"python", "http", "postgres", "duckdb", "noop", "workbook", "playbook", "artifact"}
)
# Kinds NoETL has that this engine does not run. A playbook containing such a step is
# valid (with a warning) and runs until the step is reached, which then fails naming it.
# Taken from NoETL's `ToolSpec.kind` (noetl/core/dsl/engine/models/tools.py), its worker
# dispatch (noetl/worker/nats_worker.py, noetl/tools/__init__.py), the Rust server's
# `ToolKind` (noetl/server orchestrate-core/src/playbook.rs: `subscription`, `wasm`) and
# the Rust tools crate (noetl/tools src/tools/mod.rs: `provider`, `mcp`, `result_fetch`,
# ...). Anything in neither set is a typo: a validation error with did-you-mean.
UNSUPPORTED_NOETL_KINDS: Final = frozenset(
    {
        "agent",
        "container",
        "cursor_worker",
        "ducklake",
        "gateway",
        "gcs",
        "iterator",
        "mcp",
        "nats",
        "playbooks",
        "provider",
        "result_fetch",
        "rhai",
        "script",
        "secrets",
        "shell",
        "snowflake",
        "snowflake_transfer",
        "subscription",
        "task_sequence",
        "transfer",
        "wasm",
    }
)

# Cursor drivers (`loop.cursor.kind`) the engine ships.
CURSOR_KINDS: Final = frozenset({"postgres", "sqlite"})

# --- input limits (README "Limits"; bad input is refused before anything is written) ------
# Payload containers (mappings and lists) nested deeper than this are refused: the engine
# walks payloads with recursive code (Jinja, json, pydantic), and a few hundred levels
# overflow Python's stack. Real payloads are a handful of levels deep.
MAX_PAYLOAD_DEPTH: Final = 64
# Default of NOETL_MAX_PAYLOAD_BYTES: a payload is stored in the execution row and in the
# contexts its commands render with, so it is bounded like any row (compact JSON bytes).
DEFAULT_MAX_PAYLOAD_BYTES: Final = 16 * 1024 * 1024
# A playbook file (or playbook text) larger than this is refused before parsing: PyYAML
# parses about 0.2 MB/s, and the largest real NoETL playbook is 61 KB.
MAX_PLAYBOOK_BYTES: Final = 1024 * 1024
# YAML from users (playbooks, `--set` values, credentials files) may expand through
# aliases to at most this many nodes, and nest at most this deep. A few hundred bytes of
# nested aliases ("billion laughs") would otherwise expand to 10^9 nodes; the largest
# real playbook has under 1,000 nodes and 13 levels.
MAX_YAML_NODES: Final = 100_000
MAX_YAML_DEPTH: Final = 64
