"""Publishing that survives a broker outage: a transactional outbox written only when a
publish fails, and a relay in every worker process (and `serve`) that publishes it once
the broker is back, without beat (issue 30).

- `Holding` wraps the broker's dispatcher. A publish (or wake-up) the broker could not
  take is recorded in the engine database (store.outbox) and logged in one line; the
  caller goes on (a worker's task does not crash). A start that wants to know watches
  its thread (`watching`): the engine then answers `BrokerUnavailable` naming the
  execution, which is recorded and will be published when the broker is back.
- `Relay`, every `interval` seconds on a daemon thread: asks the broker for its token
  (`Probe.probe`: a key kept in the broker itself, so a broker restarted empty, or
  flushed, has a new one), publishes what the outbox holds (commands still `issued`; a
  held wake-up is a pass run right here) and deletes it. When the broker comes back,
  or its token changed (every queued message lost), one relay across the fleet (a lease
  row in Postgres, `store.outbox.claim_recovery`) republishes every `issued` command and
  runs a pass of every execution with completions waiting: what the broker lost moves
  again within a relay interval plus the workers' reconnection, not after the reaper's
  grace, and with no beat running.

Duplicated messages are harmless (a command's conditional claim drops them), and the
outbox's rows are claimed (SKIP LOCKED) so that relays do not publish them N-fold.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from noetl_celery.engine.periodic import Periodic
from noetl_celery.passes.dispatch import Dispatcher
from noetl_celery.passes.orchestrate import PassDriver
from noetl_celery.store.outbox import KIND_COMMAND, KIND_WAKE
from noetl_celery.store.repository import Store
from noetl_celery.store.schema import utcnow

log = logging.getLogger("noetl_celery.outbox")

RELAY_SECONDS = 1.0  # how often a relay looks at the broker and the outbox
CLAIM_SECONDS = 30.0  # a relay that died holding rows gives them up after this long
# while publishes keep failing, one warning per this many seconds per process
HOLD_LOG_SECONDS = 10.0
RECOVERY_LIMIT = 100_000  # issued commands republished by one recovery at most


class Holding:
    """The broker's dispatcher, with its failures held in the outbox (never raised,
    unless the engine database is away too: then nothing was lost that the reaper
    would not republish)."""

    def __init__(self, store: Store, target: Dispatcher, broker: str) -> None:
        self.store = store
        self.target = target
        self.broker = broker  # the masked broker URL, for the log lines
        self._local = threading.local()
        self._logged_at: float | None = None

    def publish(self, command_ids: Sequence[str]) -> None:
        if not command_ids:
            return
        try:
            self.target.publish(command_ids)
        except Exception as exc:
            self._hold(exc, command_ids=list(command_ids))

    def wake(self, execution_id: str) -> None:
        try:
            self.target.wake(execution_id)
        except Exception as exc:
            self._hold(exc, wakes=[execution_id])

    def _hold(
        self, exc: Exception, command_ids: Sequence[str] = (), wakes: Sequence[str] = ()
    ) -> None:
        self.store.outbox.hold(command_ids, wakes)
        held = getattr(self._local, "held", None)
        if held is not None:
            held.extend(command_ids or wakes)
        now = time.monotonic()
        if self._logged_at is None or now - self._logged_at >= HOLD_LOG_SECONDS:
            self._logged_at = now
            what = f"{len(command_ids)} command(s)" if command_ids else "a wake-up"
            log.warning(
                "broker %s unreachable (%s): %s held in the engine database, published "
                "when it is back",
                self.broker,
                one_line(exc),
                what,
            )

    @contextmanager
    def watching(self) -> Iterator[list[str]]:
        """The ids held on this thread inside the block."""
        held: list[str] = []
        outer = getattr(self._local, "held", None)
        self._local.held = held
        try:
            yield held
        finally:
            self._local.held = outer
            if outer is not None:
                outer.extend(held)


def one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class Relay:
    """One look at the broker and the outbox (`tick`); `RelayThread` repeats it."""

    def __init__(
        self,
        store: Store,
        orchestrator: PassDriver,
        target: Dispatcher,
        probe: Callable[[], str] | None,
        broker: str,
    ) -> None:
        self.store = store
        self.orchestrator = orchestrator
        self.target = target  # the broker's own dispatcher: a failure here is ours
        self.probe = probe
        self.broker = broker
        self._token: str | None = None  # the broker's token last seen
        self._lost_at: dt.datetime | None = None  # the broker away since
        self.recovered = 0  # recoveries this relay ran (tests, logs)

    def tick(self) -> None:
        if self.probe is not None and not self._broker_back():
            return  # the broker is away: nothing can be published
        if self.store.outbox.any_held():
            self.relay()

    def _broker_back(self) -> bool:
        """False while the broker is away; once it answers again, or answers with a new
        token, run the recovery if this process wins it for the fleet."""
        assert self.probe is not None
        try:
            token = self.probe()
        except Exception as exc:
            if self._lost_at is None:
                self._lost_at = utcnow()
                log.warning("broker %s unreachable (%s)", self.broker, one_line(exc))
            return False
        if token == self._token and self._lost_at is None:
            return True
        if self._lost_at is not None:
            log.info("broker %s reachable again", self.broker)
        if self.store.outbox.claim_recovery(token, self._lost_at):
            self.recover()
        self._token, self._lost_at = token, None
        return True

    def recover(self) -> None:
        """Republish every `issued` command (its message may be gone with the broker) and
        run a pass of every execution whose completions wait (a wake-up may be gone)."""
        stale = self.store.reaper.republish_stale(0.0, limit=RECOVERY_LIMIT)
        if stale:
            try:
                self.target.publish(stale)
            except Exception as exc:  # away again: the outbox keeps them for the next relay
                self.store.outbox.hold(stale)
                log.warning("relay: republishing failed (%s); held", one_line(exc))
            else:  # those the outbox held too are published now: not a second time
                self.store.outbox.done(stale)
        woken = 0
        for execution_id in self.store.reaper.executions_to_wake(0.0):
            try:
                self.orchestrator.drive(execution_id, wait=False)
                woken += 1
            except Exception:  # the database away for a moment: the next recovery or the reaper
                log.warning("relay: a pass of execution %s failed", execution_id, exc_info=True)
        self.recovered += 1
        log.info(
            "broker %s: republished %d issued command(s), ran a pass of %d execution(s)",
            self.broker,
            len(stale),
            woken,
        )

    def relay(self) -> int:
        """Publish what the outbox holds; the number of rows it cleared."""
        cleared = 0
        while items := self.store.outbox.claim(CLAIM_SECONDS):
            ids = [i.item_id for i in items]
            commands = [i.item_id for i in items if i.kind == KIND_COMMAND]
            wakes = [i.item_id for i in items if i.kind == KIND_WAKE]
            try:
                issued = self.store.outbox.still_issued(commands)
                if issued:
                    self.target.publish(issued)
            except Exception as exc:
                self.store.outbox.release(ids)
                log.warning("relay: publishing held commands failed (%s)", one_line(exc))
                return cleared
            self.store.outbox.done(ids)
            cleared += len(ids)
            for execution_id in wakes:  # a wake-up: the pass itself, no broker needed
                self.orchestrator.drive(execution_id, wait=False)
            log.info("relay: published %d held command(s), %d wake-up(s)", len(issued), len(wakes))
        return cleared


class RelayThread(Periodic):
    """`Relay.tick` every `interval` seconds; a failing look (the engine database away)
    is logged once a minute while it lasts."""

    def __init__(self, relay: Relay, interval: float = RELAY_SECONDS) -> None:
        super().__init__(
            "noetl-relay", interval, relay.tick, log, "relay: a look at the outbox failed", 60.0
        )
        self.relay = relay
