"""`noetl-celery run PATH`: start an execution and wait for its terminal state."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.live import Live

from noetl_celery.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_RUNNING,
    build_engine,
    dump_json,
    load_settings,
)
from noetl_celery.cli.fleet import worker_check
from noetl_celery.cli.inputs import parse_payload, parse_sets
from noetl_celery.cli.targets import TargetError, read_target, start_target
from noetl_celery.cli.views import progress_renderable
from noetl_celery.constants import COMPLETED, RUNNING, TERMINAL_STATUSES
from noetl_celery.engine.service import Engine
from noetl_celery.errors import NoetlError, PlaybookInvalid
from noetl_celery.models.validation import validate_text

POLL_SECONDS = 1.0


def watch(
    engine: Engine,
    execution_id: str,
    timeout: float | None,
    on_poll: Callable[[], None] | None = None,
) -> None:
    """Wait with a live display on the terminal (stderr): running steps and a progress
    bar per running loop, from `status` once a second (a status read scans the
    execution's command rows: at 100k iterations a faster poll would cost Postgres more
    than it shows)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    console = Console(stderr=True)
    with Live(console=console, refresh_per_second=4, transient=True) as live:
        while True:
            view = engine.status(execution_id)
            live.update(progress_renderable(view))
            if view["status"] in TERMINAL_STATUSES:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"execution {execution_id} still running after {timeout}s")
            if on_poll is not None:
                on_poll()
            time.sleep(POLL_SECONDS)


def _invalid(message: str, as_json: bool, stdout: Any, execution_id: str | None = None) -> NoReturn:
    if as_json:
        dump_json(
            {
                "execution_id": execution_id,
                "status": "FAILED",
                "result": None,
                "error": message,
                "errors": [{"step": None, "item": None, "kind": "invalid", "message": message}],
                "duration_seconds": 0.0,
                "steps": {},
            },
            stdout,
        )
    else:
        click.echo(message, err=True)
    sys.exit(EXIT_INVALID)


@click.command()
@click.argument("target", metavar="PATH")
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a workload value (YAML-typed: 5 is a number).",
)
@click.option("--payload", metavar="JSON", help="JSON object merged over the workload.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("--timeout", type=float, default=None, help="Give up waiting after S seconds.")
def run(
    target: str, sets: tuple[str, ...], payload: str | None, as_json: bool, timeout: float | None
) -> None:
    """Run PATH and wait until it is COMPLETED, FAILED or CANCELLED. PATH is a playbook
    file or, when no such file exists, a registered catalog path (`examples/hello_world`,
    `examples/hello_world@2` for version 2)."""
    stdout = sys.stdout
    try:  # one line naming the input and the limit, before anything is written
        settings = load_settings()
        data = {**parse_payload(payload, settings.max_payload_bytes), **parse_sets(sets)}
        playbook = read_target(target)
    except (NoetlError, TargetError) as exc:  # bad input, a bad NOETL_* value
        _invalid(str(exc), as_json, stdout)
    started = time.monotonic()
    if playbook.text is not None:  # a registered playbook was validated when registered
        for warning in validate_text(playbook.text, target).warnings:
            click.echo(str(warning), err=True)
    try:
        engine = build_engine(settings, dispatch=True)
    except NoetlError as exc:  # misconfiguration, a database that cannot be used
        _invalid(str(exc), as_json, stdout)
    try:
        # everything but the final JSON goes to stderr (python tools print, libraries log)
        with contextlib.redirect_stdout(sys.stderr):
            try:
                execution_id = start_target(engine, playbook, data)
            except PlaybookInvalid as exc:
                _invalid(
                    "\n".join(str(p) for p in exc.problems if p.severity == "error") or str(exc),
                    as_json,
                    stdout,
                )
            except NoetlError as exc:
                _invalid(str(exc), as_json, stdout)
            if not as_json:
                click.echo(f"execution {execution_id} started", err=True)
            check = worker_check(engine, settings, execution_id)
            try:
                if not as_json and sys.stderr.isatty():
                    watch(engine, execution_id, timeout, check)
                else:
                    engine.wait(execution_id, timeout, check)
            except TimeoutError as exc:
                click.echo(str(exc), err=True)
            except NoetlError as exc:  # workers on another database; the database lost
                _invalid(str(exc), as_json, stdout, execution_id)
            summary = engine.summary(execution_id)
    finally:
        engine.close()
    if as_json:
        dump_json(summary, stdout)
    else:
        report(summary, time.monotonic() - started)
    sys.exit(exit_code(summary["status"]))


def exit_code(status: str) -> int:
    if status == COMPLETED:
        return EXIT_OK
    return EXIT_RUNNING if status == RUNNING else EXIT_FAILED


def report(summary: dict[str, Any], elapsed: float) -> None:
    """Text mode: the status line and a COMPLETED run's result on stdout; what failed on
    stderr, one line per error (a failed run has no result to print)."""
    execution_id, status = summary["execution_id"], summary["status"]
    click.echo(f"execution {execution_id}: {status} in {elapsed:.2f}s")
    if status == COMPLETED:
        click.echo(json.dumps(summary["result"], indent=2, default=str))
        return
    if status == RUNNING:
        click.echo(f"still running; follow it with `noetl-celery watch {execution_id}`", err=True)
        return
    if summary["error"]:
        click.echo(f"error: {summary['error']}", err=True)
    for error in summary.get("errors") or []:
        click.echo(f"  {error_line(error)}", err=True)


def error_line(error: dict[str, Any]) -> str:
    """`step[item] kind: message` (the item's value, shortened, after it)."""
    where = error.get("step") or "execution"
    if error.get("item") is not None:
        where += f"[{error['item']}]"
    line = f"{where} {error.get('kind') or 'error'}: {error.get('message')}"
    if error.get("value") is not None:
        line += f"  (item: {error['value']})"
    return line
