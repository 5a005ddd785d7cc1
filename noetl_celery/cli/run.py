"""`noetl-celery run FILE`: start an execution and wait for its terminal state."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click
import yaml
from rich.console import Console
from rich.live import Live

from noetl_celery.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_OK,
    build_engine,
    dump_json,
    load_settings,
)
from noetl_celery.cli.fleet import worker_check
from noetl_celery.cli.views import progress_renderable
from noetl_celery.constants import COMPLETED, TERMINAL_STATUSES
from noetl_celery.engine.service import Engine
from noetl_celery.errors import NoetlError, PlaybookInvalid


def parse_sets(pairs: tuple[str, ...]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--set")
        try:
            values[key] = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            values[key] = raw
    return values


def parse_payload(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="--payload") from exc
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--payload")
    return value


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
                "duration_seconds": 0.0,
                "steps": {},
            },
            stdout,
        )
    else:
        click.echo(message, err=True)
    sys.exit(EXIT_INVALID)


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
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
    file: Path, sets: tuple[str, ...], payload: str | None, as_json: bool, timeout: float | None
) -> None:
    """Run the playbook FILE and wait until it is COMPLETED, FAILED or CANCELLED."""
    stdout = sys.stdout
    try:
        data = {**parse_payload(payload), **parse_sets(sets)}
        text = file.read_text(encoding="utf-8")
    except (click.BadParameter, OSError) as exc:
        _invalid(
            f"{file}: {exc}" if isinstance(exc, OSError) else exc.format_message(), as_json, stdout
        )
    started = time.monotonic()
    try:
        settings = load_settings()
        engine = build_engine(settings, dispatch=True)
    except NoetlError as exc:  # misconfiguration, a database that cannot be used
        _invalid(str(exc), as_json, stdout)
    try:
        # everything but the final JSON goes to stderr (python tools print, libraries log)
        with contextlib.redirect_stdout(sys.stderr):
            try:
                execution_id = engine.start_text(text, data, file=str(file))
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
        elapsed = time.monotonic() - started
        click.echo(f"execution {summary['execution_id']}: {summary['status']} in {elapsed:.2f}s")
        if summary["error"]:
            click.echo(f"error: {summary['error']}")
        click.echo(json.dumps(summary["result"], indent=2, default=str))
    sys.exit(EXIT_OK if summary["status"] == COMPLETED else EXIT_FAILED)
