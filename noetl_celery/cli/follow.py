"""Waiting for an execution's end while showing its progress (`run`, `watch`, `rerun`).

- On a terminal (stderr) without `--json`: the live view (status, running steps, a
  progress bar per running loop) from `status` once a second.
- Otherwise, every `NOETL_PROGRESS_SECONDS` (default 5; 0: none): a plain line on
  stderr naming the running steps and one per running loop with its rate over the last
  30 s and an ETA (cli.progress). stdout is never written here.

The terminal status itself is polled often (a primary-key read); the full view, which
scans the execution's commands, only that often.

Ctrl-C (SIGINT) becomes a decision, not a traceback:
- ASK (`run` on a terminal): "Cancel execution X? [y/N]"; y cancels, anything else
  (N, Enter, a second Ctrl-C, end of input) detaches;
- CANCEL (`run --cancel-on-interrupt`): cancels at once;
- DETACH (`watch`, and `run` off a terminal without the flag): stops waiting and says
  how to re-attach (`noetl-celery watch X`). A detached execution goes on on its
  workers, except in embedded mode, where its workers are this process's threads.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, TextIO

import click

from noetl_celery.cli.common import dump_json, exit_code
from noetl_celery.cli.progress import Rates, progress_lines
from noetl_celery.constants import COMPLETED, RUNNING, TERMINAL_STATUSES

if TYPE_CHECKING:
    from noetl_celery.engine.service import Engine
    from noetl_celery.engine.summaries import RunSummary

ASK, CANCEL, DETACH = "ask", "cancel", "detach"
LIVE_REFRESH_SECONDS = 1.0
MIN_POLL_SECONDS = 0.05


class StillRunning(TimeoutError):
    """The wait ended with the execution still RUNNING (exit 3)."""


class Detached(StillRunning):
    """Ctrl-C detached from a running execution."""


def interrupt_policy(cancel_on_interrupt: bool) -> str:
    """`run`'s rule: the flag cancels; a person at a terminal is asked; a script (no
    terminal to ask on) detaches, leaving the execution to run (cancel it with
    `noetl-celery cancel`, or pass --cancel-on-interrupt)."""
    if cancel_on_interrupt:
        return CANCEL
    return ASK if sys.stdin.isatty() and sys.stderr.isatty() else DETACH


def follow(
    engine: Engine,
    execution_id: str,
    *,
    timeout: float | None,
    live: bool,
    interrupt: str = DETACH,
    owns_workers: bool = False,
    progress_seconds: float | None = None,
    on_poll: Callable[[], None] | None = None,
) -> None:
    """Return once the execution is terminal (a cancel on Ctrl-C included); raise
    StillRunning after `timeout` seconds, Detached when Ctrl-C detaches.
    `owns_workers`: this process's threads run the execution (embedded `run`).
    `on_poll` runs on every poll (`run`'s worker check, cli.fleet) and may raise."""
    every = engine.settings.progress_seconds if progress_seconds is None else progress_seconds
    interrupted = threading.Event()
    with _sigint_sets(interrupted):
        ended = _wait(engine, execution_id, timeout, live, every, interrupted, on_poll)
    if ended:
        return
    if interrupt == CANCEL or (interrupt == ASK and _confirm_cancel(execution_id)):
        engine.cancel(execution_id, "cancelled by Ctrl-C on `noetl-celery run`")
        return
    message = (
        f"detached: execution {execution_id} is still RUNNING; "
        f"re-attach with `noetl-celery watch {execution_id}`"
    )
    if owns_workers:
        message += (
            " (embedded mode: its commands run on this process's threads, so it cannot "
            "progress once this process exits, and the next embedded start ends it FAILED)"
        )
    raise Detached(message)


def _wait(
    engine: Engine,
    execution_id: str,
    timeout: float | None,
    live: bool,
    every: float,
    interrupted: threading.Event,
    on_poll: Callable[[], None] | None = None,
) -> bool:
    """True at the terminal status, False when interrupted."""
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    poll = max(MIN_POLL_SECONDS, engine.settings.wait_poll_seconds)
    show = _LiveView() if live else None
    rates = Rates()
    next_view = started
    samples = 0
    with show or nullcontext():
        while not interrupted.is_set():
            if engine.store.execution_status(execution_id) in TERMINAL_STATUSES:
                return True
            now = time.monotonic()
            if now >= next_view and (live or every > 0):
                view = engine.status(execution_id)
                if show is not None:
                    show.update(view)
                    next_view = now + LIVE_REFRESH_SECONDS
                else:
                    # sampled from the start, printed from the second sample on: the
                    # first line has a rate
                    rates.observe(view, now)
                    if samples:
                        for line in progress_lines(view, rates, _elapsed(view)):
                            click.echo(line, err=True)
                    samples += 1
                    next_view = now + every
            if deadline is not None and now >= deadline:
                raise StillRunning(f"execution {execution_id} still running after {timeout}s")
            if on_poll is not None:
                on_poll()
            # Ctrl-C is seen within one poll: the signal handler sets `interrupted`
            engine.wait_progress(poll)
    return False


class _LiveView(AbstractContextManager["_LiveView"]):
    """The live terminal view (rich), built only on a terminal: `--json` and piped runs
    never import rich."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live

        from noetl_celery.cli.renderables import progress_renderable

        self._render = progress_renderable
        self._live = Live(console=Console(stderr=True), refresh_per_second=4, transient=True)

    def __enter__(self) -> _LiveView:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._live.__exit__(*exc)

    def update(self, view: Mapping[str, Any]) -> None:
        self._live.update(self._render(view))


def _elapsed(view: Mapping[str, Any]) -> float:
    """Seconds since the execution was created (the view's duration stops at its last
    pass while a long command runs)."""
    created = dt.datetime.fromisoformat(view["created_at"].rstrip("Z"))
    return (dt.datetime.now(dt.UTC).replace(tzinfo=None) - created).total_seconds()


@contextmanager
def _sigint_sets(event: threading.Event) -> Iterator[None]:
    """While waiting, SIGINT only sets `event` (signals reach the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: event.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _confirm_cancel(execution_id: str) -> bool:
    try:
        return click.confirm(f"Cancel execution {execution_id}?", default=False, err=True)
    except click.Abort:  # a second Ctrl-C, or the end of input: leave it running
        click.echo("", err=True)
        return False


def report(summary: RunSummary, *, as_json: bool, stdout: TextIO) -> int:
    """Print the end of a wait (`run`, `watch`, `rerun`); returns the exit code. `--json`:
    the summary object. Text: the status line and a COMPLETED run's result on stdout;
    what failed on stderr, one line per error (a failed run has no result to print)."""
    if as_json:
        dump_json(summary, stdout)
        return exit_code(summary["status"])
    execution_id, status = summary["execution_id"], summary["status"]
    click.echo(
        f"execution {execution_id}: {status} in {summary['duration_seconds']:.2f}s", file=stdout
    )
    if summary.get("quarantined"):
        click.echo(
            f"{summary['quarantined']} loop items quarantined: `noetl-celery quarantine "
            f"list {execution_id}`",
            err=True,
        )
    if status == COMPLETED:
        click.echo(json.dumps(summary["result"], indent=2, default=str), file=stdout)
    elif status == RUNNING:
        click.echo(f"still running; follow it with `noetl-celery watch {execution_id}`", err=True)
    else:
        if summary["error"]:
            click.echo(f"error: {summary['error']}", err=True)
        for error in summary.get("errors") or []:
            click.echo(f"  {error_line(error)}", err=True)
    return exit_code(status)


def error_line(error: Mapping[str, Any]) -> str:
    """`step[item] kind: message` (the item's value, shortened, after it)."""
    where = error.get("step") or "execution"
    if error.get("item") is not None:
        where += f"[{error['item']}]"
    line = f"{where} {error.get('kind') or 'error'}: {error.get('message')}"
    if error.get("value") is not None:
        line += f"  (item: {error['value']})"
    return line
