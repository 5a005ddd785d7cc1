"""Leases of the commands this process runs, renewed by one daemon thread.

A command's lease (`commands.lease_until`) is set by its claim. A command still running
after a third of its lease gets it extended every third of a lease; short commands never
cost a write. The commands due at one beat are renewed together, in one statement: a
batch (worker.batch) claims many commands at once, and those not started yet need their
leases kept too. When a renewal finds a command no longer `running` (cancelled, or taken
over after this process was presumed dead) the command is marked lost: pipelines stop at
their next task boundary and the result is dropped at close.

The same thread looks up, every `poll_seconds`, the status of the commands a pipeline
asked it to watch (worker.execute's stop check): one statement for all of them, where
each pipeline used to look up its own row at its task boundaries (a query every 0.2 s
per running pipeline: 2.1 % of a worker's CPU in bench.pft_cursor, py-spy). A command
found no longer `running` is marked lost, as a failed renewal marks it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence

log = logging.getLogger("noetl_celery.heartbeat")

# renew(command_ids) -> those still ours
Renew = Callable[[Sequence[str]], Collection[str]]
# poll(command_ids) -> those still `running`
Poll = Callable[[Sequence[str]], Collection[str]]

# how often the status of watched commands is looked up (a cancel is seen this soon).
# Every 0.2 s the lookup was 2.3 % of a pool process's CPU in bench.pft_cursor (py-spy:
# a statement five times a second in each process, whatever it runs)
POLL_SECONDS = 0.5
# while polls keep failing (the database away), one log line per this many seconds: a
# line per 0.2 s tick would bury the log
POLL_FAILURE_LOG_SECONDS = 60.0


class Heartbeats:
    def __init__(
        self,
        renew: Renew,
        lease_seconds: float,
        poll: Poll | None = None,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self._renew = renew
        self._poll = poll
        self._poll_seconds = poll_seconds
        self._every = max(0.5, lease_seconds / 3)
        self._active: dict[str, float] = {}  # command id -> monotonic time of last renewal
        self._watched: dict[str, float] = {}  # command id -> monotonic time watched since
        self._lost: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()  # a command to watch: poll on the short cadence
        # whether the thread sleeps until a renewal (nothing watched when it looked): only
        # then does a first watch wake it. Waking it for every watch (a per-row drain runs
        # a pipeline per row) was 2 % of a worker's CPU in bench.pft_cursor (py-spy)
        self._sleeping_long = True
        self._poll_failed_at: float | None = None  # when a failing poll was last logged
        self._thread: threading.Thread | None = None
        self._pid = 0

    def start(self, command_id: str) -> None:
        self.start_many([command_id])

    def start_many(self, command_ids: Iterable[str]) -> None:
        with self._lock:
            now = time.monotonic()
            for command_id in command_ids:
                self._active[command_id] = now
                self._lost.discard(command_id)
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()  # a forked child needs its own thread
                self._thread = threading.Thread(
                    target=self._loop, name="noetl-heartbeat", daemon=True
                )
                self._thread.start()

    def stop(self, command_id: str) -> None:
        with self._lock:
            self._active.pop(command_id, None)
            self._watched.pop(command_id, None)
            self._lost.discard(command_id)

    def watch(self, command_id: str) -> None:
        """Look up the status of this running command every `poll_seconds` from now on
        (with every other watched command's, in one statement) until `stop`; one no
        longer `running` is marked lost. Watching again changes nothing."""
        if self._poll is None:
            raise RuntimeError("these heartbeats were built without a status poll")
        with self._lock:
            if command_id not in self._active or command_id in self._watched:
                return
            self._watched[command_id] = time.monotonic()
            wake, self._sleeping_long = self._sleeping_long, False
        if wake:  # the thread is asleep until its next renewal: short cadence now
            self._wake.set()

    def lost(self, command_id: str) -> bool:
        with self._lock:
            return command_id in self._lost

    def _due(self) -> list[str]:
        now = time.monotonic()
        with self._lock:
            return [c for c, last in self._active.items() if now - last >= self._every]

    def _to_poll(self) -> list[str]:
        """Watched commands watched for a full poll period (shorter ones cost nothing)."""
        now = time.monotonic()
        with self._lock:
            return [
                c
                for c, since in self._watched.items()
                if now - since >= self._poll_seconds and c not in self._lost
            ]

    def _poll_watched(self) -> None:
        ids = self._to_poll()
        if not ids or self._poll is None:
            return
        try:
            running = self._poll(ids)
        except Exception as exc:  # the database is away: the pipelines go on; next tick
            now = time.monotonic()
            last = self._poll_failed_at
            if last is None or now - last >= POLL_FAILURE_LOG_SECONDS:
                self._poll_failed_at = now
                log.warning(
                    "status poll of %d commands failed (%s); a cancel reaches their "
                    "pipelines once it works again (retried every %g s, logged every %g s)",
                    len(ids),
                    exc,
                    self._poll_seconds,
                    POLL_FAILURE_LOG_SECONDS,
                    exc_info=last is None,
                )
            return
        if self._poll_failed_at is not None:
            self._poll_failed_at = None
            log.info("status poll works again")
        with self._lock:
            self._lost.update(c for c in ids if c not in running and c in self._watched)

    def _loop(self) -> None:
        renew_at = time.monotonic() + self._every / 2
        while True:
            with self._lock:
                watching = bool(self._watched)
                self._sleeping_long = not watching
            now = time.monotonic()
            wait = min(renew_at - now, self._poll_seconds) if watching else renew_at - now
            if wait > 0 and self._wake.wait(wait):
                self._wake.clear()
                continue  # the first command to watch: wait on the short cadence
            self._poll_watched()
            if time.monotonic() < renew_at:
                continue
            renew_at = time.monotonic() + self._every / 2
            due = self._due()
            if not due:
                continue
            try:
                ours = self._renew(due)
            except Exception:  # the database is away: try again next tick
                log.warning("lease renewal of %d commands failed", len(due), exc_info=True)
                continue
            with self._lock:
                now = time.monotonic()
                for command_id in due:
                    if command_id not in self._active:
                        continue
                    self._active[command_id] = now
                    if command_id not in ours:
                        self._lost.add(command_id)
