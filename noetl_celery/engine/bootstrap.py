"""The one way to build an `Engine`: the CLI, the Python API, the web server and the Celery
worker runtime each name their role, and the table below says what that role may do to
the engine tables and where its commands go.

The Celery dispatcher is handed in by the caller (a `BrokerFactory`): the engine sits
below tasks/, the only Celery importer, so it cannot build one itself (docs/design.md §5).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from noetl_celery import tracing
from noetl_celery.engine.service import Engine
from noetl_celery.errors import ConfigurationError
from noetl_celery.passes.dispatch import Dispatcher
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode

# (settings, the engine database's identity) -> the dispatcher that publishes to Celery
BrokerFactory = Callable[[Settings, str | None], Dispatcher]


class Role(enum.StrEnum):
    READER = "reader"  # a CLI command that only reads (history, inspect, watch, ...)
    EDITOR = "editor"  # a CLI command that writes but starts nothing (catalog register, ...)
    CLIENT = "client"  # a CLI command or the Python API starting executions
    SERVER = "server"  # `noetl-celery serve` and `flower`: a client for many users
    WORKER = "worker"  # a Celery worker process running tasks


class Dispatch(enum.Enum):
    NONE = "none"  # commands are not sent anywhere (reads, catalog edits)
    LOCAL_OR_BROKER = "local-or-broker"  # in-process threads when embedded, else Celery
    BROKER = "broker"  # always Celery (the worker: it is one of the broker's consumers)


@dataclass(frozen=True)
class EngineOptions:
    schema: SchemaMode
    dispatch: Dispatch
    # refuse a broker with the embedded database (workers could not share it)
    require_shared_database: bool


def schema_mode(settings: Settings, *, writes: bool) -> SchemaMode:
    """What a command may do to the engine tables. Only the embedded default database (a
    file nobody else shares) is created and migrated on the way; a configured database is
    shared by workers and other clients, so changing its tables is `noetl-celery db
    upgrade`'s job alone. A read never creates anything, not even the embedded file."""
    if settings.database_url:
        return SchemaMode.REQUIRE
    return SchemaMode.MIGRATE if writes else SchemaMode.READ


def options_for(role: Role, settings: Settings) -> EngineOptions:
    """What an engine built for `role` under `settings` may do."""
    if role is Role.WORKER:
        # workers never create or migrate tables: that is `noetl-celery db upgrade`
        return EngineOptions(SchemaMode.REQUIRE, Dispatch.BROKER, require_shared_database=False)
    writes = role is not Role.READER
    dispatch = Dispatch.LOCAL_OR_BROKER if role in (Role.CLIENT, Role.SERVER) else Dispatch.NONE
    # a read with a broker but the embedded database would show an empty, unrelated
    # history as if it were the fleet's: refused like any other command
    return EngineOptions(
        schema_mode(settings, writes=writes), dispatch, require_shared_database=True
    )


def build_engine(settings: Settings, role: Role, *, broker: BrokerFactory | None = None) -> Engine:
    """An engine for `role`; `broker` builds the Celery dispatcher when the role sends
    commands to workers (needed unless the role never does)."""
    options = options_for(role, settings)
    tracing.check()  # OTEL_* asking for what cannot work: one line now, not per command
    if options.require_shared_database:
        settings.require_shared_database()
    engine = Engine(settings, schema=options.schema)
    if options.dispatch is Dispatch.NONE:
        return engine
    if options.dispatch is Dispatch.LOCAL_OR_BROKER and settings.embedded:
        engine.use_in_process_workers()
        return engine
    if broker is None:
        engine.close()
        raise ConfigurationError(f"an engine for {role} sends commands to a broker: none given")
    engine.use_broker(broker(settings, engine.database_id))
    if role is Role.CLIENT:
        # what this client ends (a cancel) is notified as the fleet's settings say
        engine.defer_engine_notifications()
    if role in (Role.WORKER, Role.SERVER):
        # what the broker could not take, or lost, is published from these processes
        # without beat (engine.outbox)
        engine.start_relay()
        engine.start_notifier()  # the notification outbox (engine.notify)
    if role is Role.WORKER:
        # a command whose worker died is re-issued when its lease runs out, with or
        # without beat: a fleet started without it (or whose beat died) would otherwise
        # leave that command `running` and its execution waiting in silence for ever
        engine.start_reaper(fallback=True)
    return engine
