"""`noetl-celery run FILE`: start an execution and wait for its terminal state."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import click
import yaml

from noetl_celery.cli.common import (
    EXIT_INVALID,
    build_engine,
    dump_json,
    exit_code,
    load_settings,
)
from noetl_celery.cli.follow import follow, interrupt_policy
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


def _invalid(message: str, as_json: bool, stdout: Any) -> None:
    if as_json:
        dump_json(
            {
                "execution_id": None,
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
@click.option(
    "--cancel-on-interrupt",
    is_flag=True,
    help="Ctrl-C cancels the execution without asking (default: ask on a terminal, "
    "otherwise detach and leave it running).",
)
def run(
    file: Path,
    sets: tuple[str, ...],
    payload: str | None,
    as_json: bool,
    timeout: float | None,
    cancel_on_interrupt: bool,
) -> None:
    """Run the playbook FILE and wait until it is COMPLETED, FAILED or CANCELLED
    (exit 0, 1; 2: invalid input; 3: still running after --timeout or a detach)."""
    stdout = sys.stdout
    try:
        data = {**parse_payload(payload), **parse_sets(sets)}
        text = file.read_text(encoding="utf-8")
    except (click.BadParameter, OSError) as exc:
        _invalid(
            f"{file}: {exc}" if isinstance(exc, OSError) else exc.format_message(), as_json, stdout
        )
    started = time.monotonic()
    engine = build_engine(load_settings(), dispatch=True)
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
            try:
                follow(
                    engine,
                    execution_id,
                    timeout=timeout,
                    live=not as_json and sys.stderr.isatty(),
                    interrupt=interrupt_policy(cancel_on_interrupt),
                    owns_workers=engine.settings.embedded,
                )
            except TimeoutError as exc:
                click.echo(str(exc), err=True)
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
    sys.exit(exit_code(summary["status"]))
