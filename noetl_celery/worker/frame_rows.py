"""A cursor frame's per-row bodies, run by the worker that claimed the frame (worker.frames,
docs/design.md §4): on up to `frame.row_concurrency` threads of this process, under the
claim's lease.

Each row's body runs as its command would (its own id, context and capture: the claim's
output capture and keychain masks, which are per command and thread-safe), with one
difference: its stop check asks about the claim, the command whose row is `running`
(the body has no row until the frame's close writes it). A frame's rows are taken in
order, each by the first free thread; a thread takes no new row once the claim is
cancelled or taken over, and the frame then comes to nothing (None: the close would
find the claim gone).

A row whose pipeline parks (a retry delay past `NOETL_PARK_AFTER_SECONDS`) is not waited
for: what it came to is a `ParkedBody`, its masked run state and due time, written as a
parked command by the frame's close (store.bodies). The frame closes when its other rows
are done, and the parked row finishes as its own command.

Threads are for bodies that call an HTTP API, with statements and no-ops beside it (the
rule is orchestrator.frame_rules.row_threads); other bodies run one row at a time here,
or, python asked to overlap rows, as a command per row, spread over processes.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from noetl_celery.logcontext import of_command
from noetl_celery.models.outcome import Outcome, StepError
from noetl_celery.store.bodies import BodyRun, ParkedBody, Ran
from noetl_celery.store.rows import ClaimedCommand
from noetl_celery.worker.heartbeat import Heartbeats
from noetl_celery.worker.parking import resume_of
from noetl_celery.worker.pipeline import Parked

log = logging.getLogger("noetl_celery.worker")


class RunBody(Protocol):
    """CommandExecutor.run_claimed: a command's masked result, never raising for its own
    faults; `watch`: the command whose status stops it, if not its own."""

    def __call__(self, command: ClaimedCommand, watch: str | None = None, /) -> object: ...


# the most row threads a process keeps (started when first needed, then reused); rows
# past it wait for a free one
MAX_ROW_THREADS = 256


class RowRunner:
    def __init__(self, heartbeats: Heartbeats) -> None:
        self.heartbeats = heartbeats
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def run(
        self, claim: ClaimedCommand, bodies: list[ClaimedCommand], threads: int, run_body: RunBody
    ) -> Ran | None:
        """Run the frame's bodies with `run_body`, at most `threads` at a time (the
        claim's lease started and its status watched by the caller); what each came to,
        in row order, or None when the claim was cancelled or taken over before its last
        row started."""
        threads = max(1, min(threads, len(bodies)))
        if threads == 1:
            ran: Ran = []
            for body in bodies:
                if self.heartbeats.lost(claim.command_id):
                    return None
                ran.append((body, self._one(claim, body, run_body)))
            return ran
        results: list[BodyRun | None] = [None] * len(bodies)
        rows = iter(range(len(bodies)))
        taking = threading.Lock()

        def drain() -> None:
            while True:
                with taking:
                    position = next(rows, None)
                if position is None or self.heartbeats.lost(claim.command_id):
                    return
                results[position] = self._one(claim, bodies[position], run_body)

        pool = self._executor()
        # each thread runs in a copy of this one's context: the claim's capture and masks
        lanes = [pool.submit(contextvars.copy_context().run, drain) for _ in range(threads)]
        for lane in lanes:
            lane.result()
        pairs = zip(bodies, results, strict=True)
        done = [(body, result) for body, result in pairs if result is not None]
        return done if len(done) == len(bodies) else None

    def _one(self, claim: ClaimedCommand, body: ClaimedCommand, run_body: RunBody) -> BodyRun:
        result = run_body(body, claim.command_id)
        if isinstance(result, Outcome):
            return result
        if isinstance(result, Parked):
            due = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(seconds=result.delay)
            log.info(
                "command %s (row of claim %s): task '%s' retries in %.3gs; parked until %s",
                body.command_id,
                claim.command_id,
                result.task,
                result.delay,
                due.isoformat(timespec="milliseconds"),
                extra=of_command(body.command_id),
            )
            return ParkedBody(resume_of(result), due)
        # inline_rows rules out a sub-playbook's wait: a bug if it comes
        message = f"the body of a frame cannot wait here ({type(result).__name__})"
        return Outcome.failed(StepError("engine_error", message))

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():  # a forked child: its own
                self._pid = os.getpid()
                self._pool = ThreadPoolExecutor(MAX_ROW_THREADS, thread_name_prefix="noetl-row")
            return self._pool
