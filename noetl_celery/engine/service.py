"""`Engine`: the composed engine behind the CLI, the Python API and Celery tasks."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from noetl_celery.constants import (
    CANCELLED,
    TERMINAL_STATUSES,
    TRIGGER_MANUAL,
)
from noetl_celery.engine import owner
from noetl_celery.engine.catalog import Catalog
from noetl_celery.engine.inprocess import InProcessDispatcher
from noetl_celery.engine.limits import limits_of
from noetl_celery.engine.notify import Deliverer, DelivererThread, Rule
from noetl_celery.engine.outbox import Holding, Relay, RelayThread, one_line
from noetl_celery.engine.pacing import FleetPaceLedger
from noetl_celery.engine.reads import EngineReads
from noetl_celery.engine.reruns import EngineReruns
from noetl_celery.engine.routing import Routed
from noetl_celery.engine.scheduler import Schedules
from noetl_celery.engine.sweeper import Reaper, ReaperPolicy, ReaperThread
from noetl_celery.errors import BrokerUnavailable
from noetl_celery.models.inputs import PayloadLimits, check_payload
from noetl_celery.models.keychain import check_startable
from noetl_celery.models.playbook import Playbook
from noetl_celery.models.schedule import parse_declared
from noetl_celery.models.script_source import StoredScripts
from noetl_celery.models.validation import ValidationReport, load_playbook, read_playbook
from noetl_celery.passes.dispatch import Dispatcher, NullDispatcher, Probe
from noetl_celery.passes.ids import new_execution_id
from noetl_celery.passes.logsink import LogSink
from noetl_celery.passes.orchestrate import PassDriver
from noetl_celery.passes.playbooks import PlaybookCache
from noetl_celery.passes.scripts import capture_scripts
from noetl_celery.passes.termination import Termination, end_tree
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode, open_database
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import CatalogEntry, ExecutionRow
from noetl_celery.tools.services import ToolServices
from noetl_celery.worker.batch import BatchExecutor
from noetl_celery.worker.closing import worker_identity
from noetl_celery.worker.execute import CommandExecutor
from noetl_celery.worker.runner import StepRunner

if TYPE_CHECKING:
    from noetl_celery.passes.pass_recorder import PassRecorder


# embedded: how long closing the engine may spend delivering notifications
FLUSH_SECONDS = 10.0
WARM_UP_WAIT_SECONDS = 10.0  # embedded start: the longest wait for the http client


class _LateDispatcher:
    """Lets the dispatcher be attached after the engine exists (it needs the engine)."""

    def __init__(self) -> None:
        self.target: Dispatcher = NullDispatcher()

    def publish(self, command_ids: Sequence[str]) -> None:
        self.target.publish(command_ids)

    def wake(self, execution_id: str) -> None:
        self.target.wake(execution_id)


def _pass_recorder(directory: str | None) -> PassRecorder | None:
    """NOETL_RECORD_PASSES' recorder; its modules are imported only when it is set."""
    if not directory:
        return None
    from noetl_celery.passes.pass_recorder import PassRecorder

    return PassRecorder(directory)


class Engine(EngineReads, EngineReruns):
    def __init__(self, settings: Settings, *, schema: SchemaMode) -> None:
        self.settings = settings
        # the schema is checked (or migrated) and the database's identity read, once
        self.database = open_database(
            settings.effective_database_url,
            schema,
            synchronous_commit=settings.synchronous_commit,
            idle_in_transaction_seconds=settings.db_idle_in_transaction_seconds,
            statement_timeout_seconds=settings.db_statement_timeout_seconds,
            pool_size=settings.db_pool_size,
            max_overflow=settings.db_max_overflow,
        )
        self.store = Store(self.database)
        # reads the credentials file when needed; paces a rate-limited API with the other
        # worker processes when they share a Postgres engine database (tools.http_pacing)
        ledger = FleetPaceLedger(self.store.pacing) if self.store.pacing.available else None
        self.services = ToolServices(settings, pace_ledger=ledger, key_ledger=ledger)
        self.services.engine_cluster = self.store.frames.cluster_id
        self.playbooks = PlaybookCache(self.store)
        # who is told when an execution ends or misses its deadline (engine.notify)
        self.store.notifications.rule = Rule(settings.notify, self.playbooks)
        self._notify_thread: DelivererThread | None = None
        self._dispatcher = _LateDispatcher()
        limits = limits_of(settings)
        self.orchestrator = PassDriver(
            self.store,
            self.playbooks,
            self._dispatcher,
            batch=settings.orchestrate_batch,
            limits=limits,
            recorder=_pass_recorder(settings.record_passes),
        )
        self.runner = StepRunner(self.store, self.services, settings)
        # what commands print and log, redacted with the tools' redactor, per command
        self.logs = LogSink(settings.log_capture_bytes, lambda: self.services.file_redactor)
        self.executor = CommandExecutor(
            self.store,
            self.playbooks,
            self.runner,
            self.orchestrator,
            settings.lease_seconds,
            logs=self.logs,
            chain_seconds=(budget := settings.batch_budget_seconds),
        )
        # `execute_commands`: many commands per broker message (worker.batch)
        self.batches = BatchExecutor(self.executor, budget, *settings.batch_options)
        self.reaper = Reaper(
            self.store,
            self.orchestrator,
            ReaperPolicy(
                issued_grace_seconds=settings.issued_grace_seconds,
                max_attempts=settings.max_attempts,
                wake_grace_seconds=settings.wake_grace_seconds,
                execution_timeout_seconds=settings.execution_timeout_seconds,
                # a holder that died mid-sweep blocks the others only this long
                lease_ttl_seconds=max(10.0, 3 * settings.reaper_interval_seconds),
            ),
            owner=worker_identity(),
            logs=self.logs,
        )
        self.payload_limits = PayloadLimits(max_bytes=settings.max_payload_bytes)
        self.schedules = Schedules(self.store, self.orchestrator, self.payload_limits)
        self.catalog = Catalog(self.store)
        self._inprocess: InProcessDispatcher | None = None
        self._reaper_thread: ReaperThread | None = None
        self._holding: Holding | None = None  # a broker's dispatcher, its failures held
        self._relay_thread: RelayThread | None = None
        # embedded: this process, whose threads run the executions it starts
        self.owner: str | None = None

    @property
    def database_id(self) -> str | None:
        """The engine database's identity; Celery messages carry it (tasks.dispatcher)."""
        return self.database.database_id

    # ---- wiring -----------------------------------------------------------------------------
    def use_dispatcher(self, dispatcher: Dispatcher) -> None:
        self._dispatcher.target = dispatcher

    def use_broker(self, dispatcher: Dispatcher) -> None:
        """Send commands through a broker: a publish it cannot take is held in the
        engine database (engine.outbox) instead of failing the caller."""
        # each command to its step's queue (engine.routing; routing)
        target = Routed(dispatcher, self.store, self.playbooks, dict(self.settings.queue_by_kind))
        self._holding = Holding(self.store, target, self.settings.shown_broker_url)
        self.use_dispatcher(self._holding)

    def start_relay(self) -> None:
        """Publish what the outbox holds, and what a broker restart lost, from a thread of
        this process (workers and `serve`; engine.outbox). Once per process."""
        if self._holding is None or self._relay_thread is not None:
            return
        target = self._holding.target
        relay = Relay(
            self.store,
            self.orchestrator,
            target,
            target.probe if isinstance(target, Probe) else None,
            self.settings.shown_broker_url,
        )
        self._relay_thread = RelayThread(relay)
        self._relay_thread.start()

    def defer_engine_notifications(self) -> None:
        """A client outside the fleet: the engine-wide notification of what it ends (a
        cancel) is decided by the fleet's deliverers, not by this environment."""
        rule = self.store.notifications.rule
        if isinstance(rule, Rule):
            rule.defer_engine = True

    def start_notifier(self) -> None:
        """Deliver the notification outbox from a thread of this process (workers,
        `serve`, the embedded process; engine.notify). Once per process."""
        if self._notify_thread is not None:
            return
        deliverer = Deliverer(
            self.store, self.settings.notify, self.playbooks, lambda: self.services.credentials
        )
        self._notify_thread = DelivererThread(deliverer)
        self._notify_thread.start()

    def check_broker(self) -> None:
        """Raise BrokerUnavailable (nothing created) when the broker cannot be reached:
        what a client checks before it starts anything. Nothing to check embedded."""
        target = self._holding.target if self._holding is not None else None
        if not isinstance(target, Probe):
            return
        try:
            target.probe()
        except Exception as exc:
            raise BrokerUnavailable(
                f"broker {self.settings.shown_broker_url} unreachable ({one_line(exc)}); "
                "nothing was started: start it, or fix NOETL_BROKER_URL"
            ) from None

    def readiness(self) -> dict[str, str]:
        """What `/api/ready` says: "ok" for the engine database when it answers at this
        engine's schema revision (a plain SELECT), "ok" for the broker when its probe
        answers ("embedded" without one); otherwise one line saying what failed (URLs
        shown without passwords)."""
        checks: dict[str, str] = {}
        try:
            self.database.prepare(SchemaMode.READ)
            checks["database"] = "ok"
        except Exception as exc:
            checks["database"] = f"unavailable: {one_line(exc)}"
        target = self._holding.target if self._holding is not None else None
        if not isinstance(target, Probe):
            checks["broker"] = "embedded"
        else:
            try:
                target.probe()
                checks["broker"] = "ok"
            except Exception as exc:
                checks["broker"] = (
                    f"unreachable: {self.settings.shown_broker_url} ({one_line(exc)})"
                )
        return checks

    @contextmanager
    def _watch_publishes(self) -> Iterator[list[str]]:
        """The ids the block's publishes held for the broker (on this thread)."""
        if self._holding is None:
            yield []
            return
        with self._holding.watching() as held:
            yield held

    def _accepted(self, execution_id: str) -> BrokerUnavailable:
        """What a start whose publishes were held raises: the execution is recorded and
        will be published when the broker is back (the API answers 202)."""
        return BrokerUnavailable(
            f"broker {self.settings.shown_broker_url} unreachable; the execution "
            f"{execution_id} is recorded and will be published when it is back",
            execution_id,
        )

    def use_in_process_workers(self) -> None:
        """Run commands on threads of this process (the embedded mode). Executions started
        here record this process as their owner; executions an embedded process that is
        gone left RUNNING are ended first (they cannot progress: engine.owner)."""
        pool = InProcessDispatcher(self.settings.embedded_workers, self.settings.batch_size)
        pool.bind(
            self.executor.execute,
            lambda eid: self.orchestrator.drive(eid, wait=True),
            self.batches.execute,
        )
        self._inprocess = pool
        self.use_dispatcher(pool)
        self.owner = owner.identity()
        owner.end_orphans(self.store, self._dispatcher, self.logs)
        # no beat here: step deadlines and the execution timeout are swept on a thread
        self.start_reaper()
        self.start_notifier()

    def start_reaper(self, *, fallback: bool = False) -> None:
        """Sweep every interval from a thread of this process (`fallback`, a worker's:
        only when nobody swept within the lease's TTL; engine.sweeper). Once per process."""
        if self._reaper_thread is None:
            interval = self.settings.reaper_interval_seconds
            self._reaper_thread = ReaperThread(self.reaper, interval, fallback=fallback)
            self._reaper_thread.start()

    def wait_progress(self, timeout: float) -> None:
        """Sleep up to `timeout` between two looks at an execution; embedded, wake as soon
        as one of this process's workers finishes a job (the end of a short run is seen
        at once, not at the next poll)."""
        if self._inprocess is not None:
            self._inprocess.wait_progress(timeout)
        else:
            time.sleep(timeout)

    def close(self) -> None:
        if self._notify_thread is not None:
            self._notify_thread.stop()
            # embedded: what this process's runs just wrote gets one try before it exits
            # (the next embedded process delivers whatever is left)
            if self._inprocess is not None:
                self._notify_thread.deliverer.flush(FLUSH_SECONDS)
            self._notify_thread.deliverer.close()
        if self._relay_thread is not None:
            self._relay_thread.stop()
        if self._holding is not None:
            close = getattr(self._holding.target, "close", None)
            if close is not None:  # the broker connection this thread published on
                close()
        if self._reaper_thread is not None:
            self._reaper_thread.stop()
        if self._inprocess is not None:
            self._inprocess.shutdown()
        self.services.close()
        self.database.dispose()

    # ---- catalog ----------------------------------------------------------------------------
    def register_text(
        self, text: str, file: str | None = None, *, install_schedule: bool = False
    ) -> tuple[Playbook, CatalogEntry]:
        """Register a playbook; with `install_schedule` (what `catalog register` does) its
        `metadata.schedule` becomes the schedule named `catalog:<path>`, replaced on every
        registration and removed when the playbook no longer declares one."""
        return self._register(load_playbook(text, file), text, file, install_schedule)

    def _register(
        self,
        playbook: Playbook,
        text: str,
        file: str | None = None,
        install_schedule: bool = False,
    ) -> tuple[Playbook, CatalogEntry]:
        scripts = capture_scripts(playbook, file, text)  # PlaybookInvalid: a script file is missing
        stored = scripts.to_json() if scripts is not None else None
        entry = self.store.register(playbook.catalog_path, playbook.metadata.name, text, stored)
        # the version holds this text and these scripts (its digest covers both), so the
        # parse done here is the one the execution's passes and tasks would redo
        playbook.attach_scripts(StoredScripts.from_json(stored))
        playbook = self.playbooks.keep(entry.catalog_id, playbook)
        if install_schedule:
            self._install_schedule(playbook)
        return playbook, entry

    def register_file(
        self, path: str | Path, *, install_schedule: bool = False
    ) -> tuple[Playbook, CatalogEntry]:
        text = read_playbook(path)  # InputInvalid: too large, not UTF-8, unreadable
        return self.register_text(text, str(path), install_schedule=install_schedule)

    def _install_schedule(self, playbook: Playbook) -> None:
        name = f"catalog:{playbook.catalog_path}"
        declared = parse_declared((playbook.metadata.model_extra or {}).get("schedule"))
        if declared is None:
            for schedule in self.schedules.all():
                if schedule.name == name:
                    self.schedules.remove(schedule.schedule_id)
            return
        self.schedules.add(playbook.catalog_path, name=name, **declared)

    # ---- executions -------------------------------------------------------------------------
    def start_entry(
        self,
        entry: CatalogEntry,
        payload: dict[str, Any] | None = None,
        *,
        parent_execution_id: str | None = None,
        parent_command_id: str | None = None,
        trigger: str = TRIGGER_MANUAL,
        rerun_of: str | None = None,
        trigger_detail: dict[str, Any] | None = None,
        redriven: Sequence[tuple[str, int, int]] = (),
    ) -> str:
        """Start an execution of a registered playbook; `PayloadInvalid` before anything
        is written when the payload is unusable. `redriven`: the quarantined items of
        `rerun_of` it runs again (marked there with the execution row)."""
        self.check_payload(payload)
        return self._start_checked(
            entry,
            payload,
            parent_execution_id=parent_execution_id,
            parent_command_id=parent_command_id,
            trigger=trigger,
            rerun_of=rerun_of,
            trigger_detail=trigger_detail,
            redriven=redriven,
        )

    def _start_checked(
        self,
        entry: CatalogEntry,
        payload: dict[str, Any] | None,
        *,
        parent_execution_id: str | None = None,
        parent_command_id: str | None = None,
        trigger: str = TRIGGER_MANUAL,
        rerun_of: str | None = None,
        trigger_detail: dict[str, Any] | None = None,
        redriven: Sequence[tuple[str, int, int]] = (),
    ) -> str:
        # a keychain entry that cannot work here (a cloud secret manager) refuses the
        # start before the execution exists; the worker checks again for executions
        # started elsewhere (sub-playbooks, schedules)
        playbook = self.playbooks.get(entry.catalog_id)
        check_startable(playbook.keychain)
        if self._inprocess is not None:  # this process runs the commands: warm it up
            warming = self.services.warm_up({tool.kind for _step, _at, tool in playbook.tools()})
            if warming is not None:
                # the first http command would wait as long, under the lock its siblings
                # need: a parallel loop's items then left at once, in any order
                warming.join(WARM_UP_WAIT_SECONDS)
        execution_id = new_execution_id()
        self.store.create_execution(
            execution_id,
            entry,
            payload,
            parent_execution_id=parent_execution_id,
            parent_command_id=parent_command_id,
            trigger=trigger,
            rerun_of=rerun_of,
            trigger_detail=trigger_detail,
            owner=self.owner,
            redriven=redriven,
        )
        with self._watch_publishes() as held:
            self.orchestrator.drive(execution_id, wait=True)
        if held:
            raise self._accepted(execution_id)
        return execution_id

    def trigger_schedule(self, schedule_id: int) -> str:
        """`schedules.trigger`, raising BrokerUnavailable naming the run when its first
        publish was held for the broker (recorded; published when it is back)."""
        with self._watch_publishes() as held:
            execution_id = self.schedules.trigger(schedule_id)
        if held:
            raise self._accepted(execution_id)
        return execution_id

    def check_payload(self, payload: dict[str, Any] | None) -> None:
        """Raise `PayloadInvalid` (key path and limit named) for a payload that is too
        deep, too large or holds what Postgres cannot store (models.inputs)."""
        check_payload(payload, self.payload_limits)

    def start_text(
        self,
        text: str,
        payload: dict[str, Any] | None = None,
        file: str | None = None,
        *,
        validated: ValidationReport | None = None,
    ) -> str:
        """Register `text` and start it. `validated`: the report of `validate_text(text,
        file)` when the caller has it already (`run` prints its warnings first), so the
        text is not parsed again; an invalid one raises `PlaybookInvalid` as `text` would."""
        self.check_payload(payload)  # before the playbook is registered: nothing written
        if validated is not None and validated.ok and validated.text != text:
            # registering `text` with another text's playbook would run what the catalog
            # does not show
            raise ValueError("start_text: `validated` is the report of another text")
        playbook = load_playbook(text, file) if validated is None else validated.require()
        check_startable(playbook.keychain)  # likewise
        _, entry = self._register(playbook, text, file)
        return self._start_checked(entry, payload)

    def start_path(
        self, catalog_path: str, payload: dict[str, Any] | None = None, version: int | None = None
    ) -> str:
        self.check_payload(payload)
        return self._start_checked(self.store.resolve_catalog(catalog_path, version), payload)

    def wait(
        self,
        execution_id: str,
        timeout: float | None = None,
        on_poll: Callable[[], None] | None = None,
    ) -> ExecutionRow:
        """Poll until terminal; raises TimeoutError with the execution still running.
        `on_poll` runs on every poll (the CLI's worker check) and may raise to stop."""
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = self.settings.wait_poll_seconds
        while True:
            if self.store.execution_status(execution_id) in TERMINAL_STATUSES:
                return self.store.execution(execution_id)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"execution {execution_id} still running after {timeout}s")
            if on_poll is not None:
                on_poll()
            self.wait_progress(interval)

    def cancel(self, execution_id: str, reason: str = "cancelled") -> bool:
        """End a running execution CANCELLED, with its children: nothing more is issued or
        claimed, running pipelines stop at their next task boundary. False when it had
        already ended."""
        return self.cancel_tree(execution_id, reason) is not None

    def cancel_tree(self, execution_id: str, reason: str = "cancelled") -> Termination | None:
        """`cancel`, telling what it left behind: per execution of the tree, the rows its
        cursor steps had claimed and will not process. None when it had already ended."""
        self.store.execution(execution_id)  # raises ExecutionNotFound
        return end_tree(self.store, self._dispatcher, execution_id, CANCELLED, reason)
