"""`noetl-celery run PATH`: start an execution and wait for its terminal state."""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click

from noetl_celery.cli.common import EXIT_INVALID, build_engine, dump_json, load_settings
from noetl_celery.cli.fleet import worker_check
from noetl_celery.cli.follow import follow, interrupt_policy, report
from noetl_celery.cli.inputs import parse_payload, parse_sets
from noetl_celery.cli.targets import Target, TargetError, read_target, start_target
from noetl_celery.constants import FAILED
from noetl_celery.engine.bootstrap import Role
from noetl_celery.errors import BrokerUnavailable, NoetlError, PlaybookInvalid
from noetl_celery.models.validation import ValidationReport, validate_text

if TYPE_CHECKING:
    from noetl_celery.engine.service import Engine


def _invalid(message: str, as_json: bool, stdout: Any, execution_id: str | None = None) -> NoReturn:
    if as_json:
        dump_json(
            {
                "execution_id": execution_id,
                "status": FAILED,
                "result": None,
                "error": message,
                "errors": [{"step": None, "item": None, "kind": "invalid", "message": message}],
                "quarantined": 0,
                "duration_seconds": 0.0,
                "steps": {},
            },
            stdout,
        )
    else:
        click.echo(message, err=True)
    sys.exit(EXIT_INVALID)


def _start(
    engine: Engine,
    playbook: Target,
    data: dict[str, Any],
    validated: ValidationReport | None,
    as_json: bool,
    stdout: Any,
) -> str:
    """Start it and say so; exit 2 on input the engine refuses."""
    try:
        execution_id = start_target(engine, playbook, data, validated)
    except BrokerUnavailable as exc:
        if exc.execution_id is None:
            _invalid(str(exc), as_json, stdout)
        # the broker went away since the check: the execution is recorded and its
        # commands are held until it is back (engine.outbox); follow it
        click.echo(str(exc), err=True)
        return exc.execution_id
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
    return execution_id


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
@click.option(
    "--cancel-on-interrupt",
    is_flag=True,
    help="Ctrl-C cancels the execution without asking (default: ask on a terminal, "
    "otherwise detach and leave it running).",
)
def run(
    target: str,
    sets: tuple[str, ...],
    payload: str | None,
    as_json: bool,
    timeout: float | None,
    cancel_on_interrupt: bool,
) -> None:
    """Run PATH and wait until it is COMPLETED, FAILED or CANCELLED (exit 0, 1; 2: invalid
    input; 3: still running after --timeout or a detach). PATH is a playbook file or,
    when no such file exists, a registered catalog path (`examples/hello_world`,
    `examples/hello_world@2` for version 2)."""
    stdout = sys.stdout
    try:  # one line naming the input and the limit, before anything is written
        settings = load_settings()
        data = {**parse_payload(payload, settings.max_payload_bytes), **parse_sets(sets)}
        playbook = read_target(target)
    except (NoetlError, TargetError) as exc:  # bad input, a bad NOETL_* value
        _invalid(str(exc), as_json, stdout)
    validated = None
    if playbook.text is not None:  # a registered playbook was validated when registered
        validated = validate_text(playbook.text, target)
        for warning in validated.warnings:
            click.echo(str(warning), err=True)
    try:
        engine = build_engine(settings, Role.CLIENT)
    except NoetlError as exc:  # misconfiguration, a database that cannot be used
        _invalid(str(exc), as_json, stdout)
    try:  # a broker that cannot be reached: say so before anything is created
        engine.check_broker()
    except BrokerUnavailable as exc:
        engine.close()
        _invalid(str(exc), as_json, stdout)
    try:
        # everything but the final JSON goes to stderr (python tools print, libraries log)
        with contextlib.redirect_stdout(sys.stderr):
            execution_id = _start(engine, playbook, data, validated, as_json, stdout)
            try:
                follow(
                    engine,
                    execution_id,
                    timeout=timeout,
                    live=not as_json and sys.stderr.isatty(),
                    interrupt=interrupt_policy(cancel_on_interrupt),
                    owns_workers=engine.settings.embedded,
                    on_poll=worker_check(engine, settings, execution_id),
                )
            except TimeoutError as exc:  # still running: after --timeout, or detached
                click.echo(str(exc), err=True)
            except NoetlError as exc:  # workers on another database; the database lost
                _invalid(str(exc), as_json, stdout, execution_id)
            summary = engine.summary(execution_id)
    finally:
        engine.close()
    sys.exit(report(summary, as_json=as_json, stdout=stdout))
