"""`noetl-celery watch ID`: attach to an execution, from any process, until its end."""

from __future__ import annotations

import sys

import click

from noetl_celery.cli.common import InvalidInput, build_engine, load_settings
from noetl_celery.cli.follow import DETACH, follow, report
from noetl_celery.engine.bootstrap import Role
from noetl_celery.errors import ExecutionNotFound


@click.command()
@click.argument("execution_id")
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=None, help="Stop waiting after S seconds."
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary object on stdout.")
def watch(execution_id: str, timeout: float | None, as_json: bool) -> None:
    """Follow an execution (running or ended) until it ends, with `run`'s live view on a
    terminal and progress lines otherwise; exit like `run` (0 COMPLETED, 1 FAILED or
    CANCELLED, 2 unknown execution, 3 still running after --timeout). Ctrl-C detaches:
    the execution goes on."""
    stdout = sys.stdout
    engine = build_engine(load_settings(), Role.READER)
    try:
        try:
            engine.store.execution_status(execution_id)
        except ExecutionNotFound as exc:
            raise InvalidInput(str(exc)) from exc
        try:
            follow(
                engine,
                execution_id,
                timeout=timeout,
                live=not as_json and sys.stderr.isatty(),
                interrupt=DETACH,
            )
        except TimeoutError as exc:
            click.echo(str(exc), err=True)
        summary = engine.summary(execution_id)
    finally:
        engine.close()
    sys.exit(report(summary, as_json=as_json, stdout=stdout))
