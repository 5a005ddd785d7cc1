"""`events` and `logs`: an execution's history, filtered in SQL, optionally followed.

Both show the newest `--limit` matching rows (oldest first, with a note on stderr saying
how many were left out; `--limit 0` shows all), and with `--follow` keep printing new
rows until the execution has ended (with `--json`, one object per line then).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from noetl_celery.cli.common import InvalidInput, build_engine, dump_json, load_settings
from noetl_celery.constants import EVENT_TYPES, FAILURE_EVENTS, TERMINAL_STATUSES
from noetl_celery.engine.bootstrap import Role
from noetl_celery.engine.service import Engine
from noetl_celery.errors import ExecutionNotFound

if TYPE_CHECKING:
    from noetl_celery.store.rows import EventJSON, LogJSON

FOLLOW_POLL_SECONDS = 0.5
DEFAULT_LIMIT = 200
EXIT_INTERRUPTED = 130  # Ctrl-C ends a --follow: the shell's convention for SIGINT

# (after, limit) -> (rows oldest first, how many the limit left out)
Fetch = Callable[[int | None, int | None], tuple[Sequence[Mapping[str, Any]], int]]


def _check(engine: Engine, execution_id: str, step: str | None) -> None:
    """Unknown executions and steps are bad input (exit 2), not an empty listing."""
    try:
        row = engine.store.execution(execution_id)
    except ExecutionNotFound as exc:
        raise InvalidInput(str(exc)) from exc
    playbook = engine.playbooks.get(row.catalog_id)
    if step is not None and not playbook.has_step(step):
        names = ", ".join(s.step for s in playbook.workflow)
        raise InvalidInput(f"no step '{step}' in {row.path} (steps: {names})")


def _list(
    engine: Engine,
    execution_id: str,
    fetch: Fetch,
    key: str,
    *,
    limit: int,
    follow: bool,
    as_json: bool,
    show: Callable[[Mapping[str, Any]], None],
    what: str,
) -> None:
    rows, left_out = fetch(None, limit or None)
    if left_out:
        click.echo(f"{left_out} earlier {what} not shown (--limit 0 shows all)", err=True)
    if not follow:
        if as_json:
            dump_json(rows)
        else:
            for row in rows:
                show(row)
        return
    emit = dump_json if as_json else show
    last = 0
    try:
        while True:
            for row in rows:
                emit(row)
                last = row[key]
            # the status is read before the rows: whatever the terminal transaction
            # committed (the last events and logs) is read after it
            ended = engine.store.execution_status(execution_id) in TERMINAL_STATUSES
            rows = fetch(last, None)[0]
            if rows:
                continue  # a burst: read on at once
            if ended:
                return
            time.sleep(FOLLOW_POLL_SECONDS)
    except KeyboardInterrupt:
        raise SystemExit(EXIT_INTERRUPTED) from None


def _show_event(e: Mapping[str, Any]) -> None:
    where = e["step"] or ""
    if e["iteration"] is not None:
        where += f"[{e['iteration']}]"
    payload = json.dumps(e["payload"], default=str)
    click.echo(f"{e['event_id']:>8} {e['created_at']} {e['type']:<22} {where:<30} {payload[:120]}")


def _show_log(r: Mapping[str, Any]) -> None:
    where = r["step"] or "(execution)"
    if r["iteration"] is not None:
        where += f"[{r['iteration']}]"
    source = f"command {r['command_id']}" if r["command_id"] else "engine"
    click.echo(f"=== {where}  {source}  {r['created_at']}  trace {r['trace_id']}")
    click.echo(r["text"], nl=not r["text"].endswith("\n"))
    if r["truncated"]:
        click.echo("[... truncated: NOETL_LOG_CAPTURE_BYTES]")


_LIMIT = click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=DEFAULT_LIMIT,
    show_default=True,
    help="Show the newest N (0: all).",
)
_FOLLOW = click.option(
    "--follow", "-f", is_flag=True, help="Keep printing new ones until the execution ends."
)
_JSON = click.option(
    "--json", "as_json", is_flag=True, help="One JSON array (with --follow: one object a line)."
)


@click.command()
@click.argument("execution_id")
@click.option(
    "--type",
    "types",
    multiple=True,
    metavar="T",
    help="Only events of type T (repeatable: any of them).",
)
@click.option("--step", metavar="S", help="Only events of step S.")
@click.option("--failed", is_flag=True, help="Only failures: " + ", ".join(sorted(FAILURE_EVENTS)))
@_LIMIT
@_FOLLOW
@_JSON
def events(
    execution_id: str,
    types: tuple[str, ...],
    step: str | None,
    failed: bool,
    limit: int,
    follow: bool,
    as_json: bool,
) -> None:
    """Events of an execution, oldest first. Filters combine: --type T --failed shows
    failures of type T."""
    unknown = sorted(set(types) - EVENT_TYPES)
    if unknown:
        raise click.BadParameter(
            f"unknown event type {unknown[0]!r} (one of: {', '.join(sorted(EVENT_TYPES))})",
            param_hint="--type",
        )
    wanted = set(types) or set(EVENT_TYPES)
    if failed:
        wanted &= FAILURE_EVENTS
    # no filter at all reads every type, including any this CLI does not know yet
    chosen = () if wanted == set(EVENT_TYPES) else tuple(sorted(wanted))
    engine = build_engine(load_settings(), Role.READER)
    try:
        _check(engine, execution_id, step)
        if not chosen and (types or failed):
            return _nothing(as_json)

        def fetch(after: int | None, count: int | None) -> tuple[list[EventJSON], int]:
            return engine.events_page(
                execution_id, types=chosen, step=step, after=after, limit=count
            )

        _list(
            engine,
            execution_id,
            fetch,
            "event_id",
            limit=limit,
            follow=follow,
            as_json=as_json,
            show=_show_event,
            what="events",
        )
    finally:
        engine.close()


def _nothing(as_json: bool) -> None:
    """Filters that exclude each other (--type loop.done --failed) match nothing."""
    if as_json:
        dump_json([])


@click.command()
@click.argument("execution_id")
@click.option("--step", metavar="S", help="Only what commands of step S printed and logged.")
@_LIMIT
@_FOLLOW
@_JSON
def logs(execution_id: str, step: str | None, limit: int, follow: bool, as_json: bool) -> None:
    """What the execution's commands printed and logged (python `print`, `logging`, the
    engine's lines about them), redacted, in the order they were stored: one block per
    command run, headed by its step, iteration and command id."""
    engine = build_engine(load_settings(), Role.READER)
    try:
        _check(engine, execution_id, step)

        def fetch(after: int | None, count: int | None) -> tuple[list[LogJSON], int]:
            return engine.logs_page(execution_id, step=step, after=after, limit=count)

        _list(
            engine,
            execution_id,
            fetch,
            "log_id",
            limit=limit,
            follow=follow,
            as_json=as_json,
            show=_show_log,
            what="log blocks",
        )
    finally:
        engine.close()
