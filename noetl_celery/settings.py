"""Engine settings, read from the environment (`NOETL_` prefix) at composition roots only.

Library code receives a `Settings` object; it never reads `os.environ` itself, so tests
can build any configuration without touching the process environment.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from noetl_celery.constants import DEFAULT_MAX_PAYLOAD_BYTES
from noetl_celery.errors import ConfigurationError
from noetl_celery.routing import parse_queue_by_kind
from noetl_celery.settings_notify import NotifySettings, notify_settings

# Bounds on the engine's own Postgres sessions (see Settings). Module constants because
# store.database uses them as its defaults too.
DB_IDLE_IN_TRANSACTION_SECONDS = 10.0
DB_STATEMENT_TIMEOUT_SECONDS = 60.0
# engine connections a thread-pool worker keeps beyond one per thread (the heartbeat's
# renewals, the stop checks and a pass's reads overlap with the threads' own)
THREAD_POOL_SPARE = 4
# command ids per broker message (NOETL_BATCH_SIZE): the default, and the most accepted.
# A batch shares the broker message, the claim and the close among its commands; one whose
# command waits on I/O hands its unstarted rest back while that command still runs
# (worker.handback), so I/O-bound items still overlap. 1 turns batching off.
DEFAULT_BATCH_SIZE = 50
MAX_BATCH_SIZE = 1000

_USERINFO = re.compile(r"^(?P<scheme>[^:/?#]+://)(?P<user>[^:@/?#]*):(?P<password>[^/?#]*)@")
_SECRET_PARAMS = {"password", "passwd", "sslpassword"}


def mask_url(url: str) -> str:
    """`url` safe to print: a password in it (`user:pw@` or a `password=` parameter)
    becomes `***`. Error messages, banners and diagnostics all name databases and brokers
    through this, so a secret never reaches a terminal or a log. Never raises: a
    malformed URL is what an error message most needs to show."""
    masked = _USERINFO.sub(
        lambda m: f"{m['scheme']}{m['user']}:{'***' if m['password'] else ''}@", url, count=1
    )
    base, sep, query = masked.partition("?")
    if not sep:
        return masked
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(k.lower() in _SECRET_PARAMS for k, _ in pairs):
        return masked
    safe = [(k, "***" if k.lower() in _SECRET_PARAMS else v) for k, v in pairs]
    return f"{base}?{urlencode(safe, safe='*')}"


# Ages (`noetl-celery db prune --older-than`, NOETL_RETENTION): how long ago an execution
# ended. Here rather than in models.durations (whose forms are NoETL's step timeouts, with
# no days) because settings, below models, parses NOETL_RETENTION. A unit is required: a
# bare `30` read as seconds when days were meant would delete history nobody meant to lose.
AGE_HINT = "use a number with a unit: 30d, 12h, 90m or 45s"
_AGE_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_AGE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(s|min|m|h|d)", re.IGNORECASE)


def age_seconds(value: str) -> float | None:
    """Seconds for an age such as `30d`, `12h`, `90m`, `45s`; None for anything else (no
    unit, an unknown unit, zero, a negative or non-finite number)."""
    match = _AGE.fullmatch(value.strip())
    if match is None:
        return None
    number, unit = match.groups()
    seconds = float(number) * _AGE_UNITS[unit.lower()]
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def not_an_age(value: str) -> str:
    """`'30x' is not an age: use ...` (the caller names the option or variable)."""
    return f"{value!r} is not an age: {AGE_HINT}"


def _retention(env: Mapping[str, str]) -> float:
    raw = env.get("NOETL_RETENTION", "").strip()
    if not raw:
        return 0.0
    seconds = age_seconds(raw)
    if seconds is None:
        raise ConfigurationError(f"NOETL_RETENTION: {not_an_age(raw)} (unset: never prune)")
    return seconds


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from exc
    if value < minimum:
        raise ConfigurationError(f"{name} must be >= {minimum}, got {value}")
    return value


def _batch_size(env: Mapping[str, str], default: int) -> int:
    value = _int(env, "NOETL_BATCH_SIZE", default, 1)
    if value > MAX_BATCH_SIZE:
        raise ConfigurationError(
            f"NOETL_BATCH_SIZE must be <= {MAX_BATCH_SIZE} (command ids per broker message), "
            f"got {value}; a batch runs on one worker process, so a smaller one spreads better"
        )
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name} must be a number, got {raw!r}") from exc
    if value < 0:
        raise ConfigurationError(f"{name} must be >= 0, got {value}")
    return value


def parse_rate_limits(text: str) -> tuple[tuple[str, float], ...]:
    """`host:port=rate[,host:port=rate...]` (NOETL_HTTP_RATE_LIMITS) -> ((host:port, rate),
    ...); a host without a port gets 80. ConfigurationError names a bad entry."""
    limits: dict[str, float] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        host, sep, rate_text = entry.rpartition("=")
        host = host.strip().lower()
        try:
            rate = float(rate_text)
        except ValueError:
            rate = -1.0
        if not sep or not host or not rate > 0 or not math.isfinite(rate):
            raise ConfigurationError(
                f"NOETL_HTTP_RATE_LIMITS must be host:port=requests_per_second[,...], got {entry!r}"
            )
        limits[host if ":" in host else f"{host}:80"] = rate
    return tuple(limits.items())


def _finite(env: Mapping[str, str], name: str, default: float) -> float:
    """`_float`, and neither NaN nor infinity (a threshold compared with every delay)."""
    value = _float(env, name, default)
    if not math.isfinite(value):
        raise ConfigurationError(f"{name} must be a finite number of seconds, got {value}")
    return value


def _choice(env: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in allowed:
        raise ConfigurationError(f"{name} must be one of {', '.join(allowed)}, got {raw!r}")
    return raw


def _names(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A comma-separated list (empty entries dropped)."""
    return tuple(part.strip() for part in env.get(name, "").split(",") if part.strip())


@dataclass(frozen=True)
class Settings:
    """Everything configurable. Defaults give the embedded mode (SQLite, in-process)."""

    home: Path = field(default_factory=lambda: Path.home() / ".noetl-celery")
    database_url: str = ""  # empty -> embedded SQLite file under `home`
    broker_url: str = ""  # empty -> in-process workers, no broker
    credentials_file: str = ""
    # in-process worker threads for the embedded mode
    embedded_workers: int = 8
    # a running command's lease; the worker renews it every lease/3 s (heartbeat); a
    # command whose lease expired is presumed lost with its worker and issued again
    lease_seconds: int = 30
    # how often the reaper sweeps (a celery beat entry, or a thread in embedded mode)
    reaper_interval_seconds: float = 5.0
    # an issued command no worker started after this long is published again (lost
    # message, flushed broker); duplicates are harmless (conditional claim)
    issued_grace_seconds: float = 30.0
    # runs of a command whose worker was lost, before it fails for good
    max_attempts: int = 3
    # runs of a cursor claim that fails with a retryable error (the queue database
    # restarting, a deadlock) before its step fails (a loop's `frame.max_attempts` wins),
    # and the wait before its second run, doubled for each later one (capped by
    # max_retry_delay_seconds); the reaper's sweep issues it when the wait is over
    claim_max_attempts: int = 5
    claim_retry_delay_seconds: float = 1.0
    # frames a cursor lane with `frame.process: frame` runs past one pass, its worker
    # issuing each next claim itself (orchestrator.cursor's chains; 0: a pass per frame)
    cursor_chain: int = 8
    # an execution with completions waiting this long and nobody folding them is woken
    wake_grace_seconds: float = 5.0
    # an execution running longer than this fails (0: no limit)
    execution_timeout_seconds: float = 0.0
    # how often beat looks for due cron schedules
    schedule_tick_seconds: float = 1.0
    # completions folded per orchestration transaction (bounds transaction time)
    orchestrate_batch: int = 1000
    # command ids one broker message carries at most (worker.batch); 1: one per message
    batch_size: int = DEFAULT_BATCH_SIZE
    # a worker running a batch hands the commands it has not started yet back (issued
    # again, republished as one batch) once it has run this long: a slow item must not
    # hold the rest of its batch while other worker processes idle
    batch_budget_seconds: float = 0.5
    # commands of a slow batch run side by side in one process close together: a close
    # waits this long at most for others of its process (worker.close_window; 0: alone)
    close_window_seconds: float = 0.15
    # threads per worker process that run the rest of a slow batch beside its slow
    # command when it waits (worker.batch); 0: none, the rest is handed back instead
    beside_threads: int = 64
    # default HTTP timeout when a tool gives none
    http_timeout_seconds: float = 60.0
    # requests per second per `host:port` for the http tool's pacer (tools.http_pacing):
    # the starting rate and a ceiling, for the fleet's worker processes together on a
    # Postgres engine database, per process otherwise. Hosts not listed are paced only
    # once they answer 429
    http_rate_limits: tuple[tuple[str, float], ...] = ()
    # "on": the worker processes of a Postgres engine database book a paced host's
    # requests from one schedule (store.pacing); "process": each process paces its own
    # requests; "off": the http tool sends every request at once
    http_pacing: str = "on"
    # "thread": the http tool's connections are pooled per thread (tools.http_threads: a
    # thread keeps one per host); "process": one pool for the process's threads (fewer
    # connections to an API that caps them per client, more CPU per request)
    http_pools: str = "thread"
    # rows kept from one postgres statement; beyond it the result says `truncated`
    postgres_max_rows: int = 100_000
    # `jump` actions allowed in one pipeline run before it fails (runaway guard)
    max_pipeline_jumps: int = 100_000
    # longest single retry delay a policy may ask for, seconds
    max_retry_delay_seconds: float = 300.0
    # a pipeline retry that waits longer than this (its backoff, or a `Retry-After`)
    # parks its command in Postgres (`delayed`, due at the end of the wait) and frees the
    # worker's slot; the reaper's sweep issues it when due and it resumes at the waiting
    # task. Shorter waits sleep in place (a round trip through the reaper costs more)
    park_after_seconds: float = 1.0
    # NOETL_THROTTLE_RELEASE_SECONDS: a loop item parked for its rate_limit key's turn
    # gives its window slot back when that turn is at most this far away (0: never;
    # orchestrator.loops.on_parked)
    throttle_release_seconds: float = 120.0
    # how often `run` / `wait` poll the database for the terminal state
    wait_poll_seconds: float = 0.05
    # where duckdb files of executions live (default: home/duckdb)
    duckdb_dir: str = ""
    # per-item results kept in a loop step's result (`{{ step.results }}`); the counts in
    # `stats` are always exact, this only bounds how many item results are carried along
    loop_results_cap: int = 100
    # `mode: parallel` without `max_in_flight`
    default_parallel_window: int = 10
    # "strict" (undefined names/attributes fail the step) or "noetl" (NoETL's rendering:
    # a failed template keeps its raw text; see templating.renderer)
    template_mode: str = "strict"
    # a directory: every orchestration pass is written there as a JSON record (its
    # inputs and decision) for the replay tests (tests/fixtures/passes); off when empty
    record_passes: str = ""
    # Postgres `synchronous_commit` of the engine's bookkeeping. "off" (default) lets a
    # crash lose the last few hundred ms of commits, which the engine re-derives (passes
    # are redone, commands re-run); a transaction that ends an execution always commits
    # synchronously, so a terminal status anyone saw is durable (and all before it).
    synchronous_commit: str = "off"
    # Postgres ends an engine session whose transaction sat idle this long (0: never).
    # An orchestration pass holds its execution's row lock in an open transaction; a
    # holder that stops (GC pause, VM freeze, SIGSTOP, debugger) would stop the
    # execution with it. Its transaction is rolled back (a pass is redone whole) and the
    # reaper's wake-up drives the execution again: a frozen holder stalls it about this
    # long plus `wake_grace_seconds`. Keep it well above the longest pause a healthy
    # process makes between two statements of one transaction.
    db_idle_in_transaction_seconds: float = DB_IDLE_IN_TRANSACTION_SECONDS
    # Postgres cancels an engine statement running this long (0: never), waits for a
    # lock included: a backstop against a lock holder stuck inside a statement
    db_statement_timeout_seconds: float = DB_STATEMENT_TIMEOUT_SECONDS
    # the engine database's connection pool per process: kept connections, and how many
    # more may be opened at a peak (a worker on a thread pool raises both to its
    # concurrency, see for_worker_threads)
    db_pool_size: int = 5
    db_max_overflow: int = 20
    # commands a worker process runs at once on threads (`--pool threads -c N`; 0 for
    # a process per command): set by the worker runtime, not from the environment
    worker_threads: int = 0
    # largest payload `run` / `submit` / `schedule add` accept, as compact JSON bytes;
    # a larger one is refused before anything is written (it is stored in rows)
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    # what a command prints and logs is kept (redacted) up to this many bytes per command
    # in `command_logs` (`noetl-celery logs`); 0 keeps nothing
    log_capture_bytes: int = 64 * 1024
    # `run` / `watch` off a terminal: one progress line per running loop every this many
    # seconds on stderr (0: none)
    progress_seconds: float = 5.0
    # `noetl-celery serve`: a bearer token (`Authorization: Bearer T`, also NoETL's CLI
    # `--session-token T`) and/or HTTP basic `user:password`; either one lets a request
    # in. Without both, serve binds loopback only.
    api_token: str = field(default="", repr=False)
    api_basic_auth: str = field(default="", repr=False)
    # origins allowed by CORS (comma-separated in NOETL_API_CORS_ORIGINS; empty: none);
    # they may also send state-changing requests (web.guard)
    api_cors_origins: tuple[str, ...] = ()
    # names `serve` answers to besides loopback ones (NOETL_API_ALLOWED_HOSTS, comma-
    # separated, `*.example.com` for subdomains): any other Host is refused (web.guard)
    api_allowed_hosts: tuple[str, ...] = ()
    # notifications of failed/cancelled runs and missed deadlines (engine.notify)
    notify: NotifySettings = field(default_factory=NotifySettings)
    # NOETL_RETENTION (an age: 30d, 12h): beat sends the prune task, and ended executions
    # older than this are deleted with all their rows, once a day (store.retention). 0,
    # the default (unset): nothing is ever deleted
    retention_seconds: float = 0.0
    # RabbitMQ: the type of the queues the engine declares ("classic" or "quorum"; a
    # queue that already exists with another type is refused by RabbitMQ: delete it or
    # use a new vhost). Redis ignores it. Queues are durable and messages persistent.
    broker_queue_type: str = "classic"
    # a worker told to stop (SIGTERM) takes no new message, lets what runs finish for at
    # most this long, then hands back what still runs (released in Postgres, published
    # again for another worker) and exits (tasks.shutdown); below Kubernetes' 30 s grace
    worker_shutdown_seconds: float = 20.0
    # tool kind -> queue (NOETL_QUEUE_BY_KIND=http:io,python:cpu): commands of a step of
    # that kind go to that queue (a step's `spec.queue` wins); see routing
    queue_by_kind: tuple[tuple[str, str], ...] = ()

    @property
    def embedded(self) -> bool:
        """True when no broker is configured: commands run in this process."""
        return not self.broker_url

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.home / 'noetl.sqlite3'}"

    @property
    def batch_options(self) -> tuple[float, int]:
        """What worker.batch.BatchExecutor takes past its budget, in its order: the
        close window (seconds) and the beside threads."""
        return self.close_window_seconds, self.beside_threads

    @property
    def shown_database_url(self) -> str:
        """The engine database's URL as messages show it (password masked)."""
        return mask_url(self.effective_database_url)

    @property
    def shown_broker_url(self) -> str:
        return mask_url(self.broker_url) if self.broker_url else "none (in-process workers)"

    def require_shared_database(self) -> None:
        """Workers on a broker run in other processes, often on other machines: they can
        only share a Postgres database, never the embedded SQLite file (each would write
        a file of its own, or fight over one)."""
        if not self.broker_url or not self.effective_database_url.startswith("sqlite"):
            return
        what = "is a SQLite URL" if self.database_url else "is not"
        raise ConfigurationError(
            f"NOETL_BROKER_URL is set but NOETL_DATABASE_URL {what}: workers cannot share "
            "the embedded SQLite file; set NOETL_DATABASE_URL=postgresql://..."
        )

    @property
    def effective_duckdb_dir(self) -> Path:
        return Path(self.duckdb_dir) if self.duckdb_dir else self.home / "duckdb"

    def for_worker_threads(self, concurrency: int) -> Settings:
        """The settings of a worker running `concurrency` commands on threads of one
        process (`--pool threads`, gevent, eventlet): every thread may hold an engine
        connection for its command and a second one at its close (the in-place pass, a
        child started), besides the heartbeat's; the pool keeps one per thread and may
        open as many again at a peak, never fewer than configured. The postgres tool's
        pool per credential may hold one connection per thread too."""
        return replace(
            self,
            worker_threads=concurrency,
            db_pool_size=max(self.db_pool_size, concurrency + THREAD_POOL_SPARE),
            db_max_overflow=max(self.db_max_overflow, concurrency + THREAD_POOL_SPARE),
        )

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        home = env.get("NOETL_HOME")
        base = cls() if not home else cls(home=Path(home).expanduser())
        return replace(
            base,
            database_url=env.get("NOETL_DATABASE_URL", "").strip(),
            broker_url=env.get("NOETL_BROKER_URL", "").strip(),
            credentials_file=env.get("NOETL_CREDENTIALS_FILE", "").strip(),
            embedded_workers=_int(env, "NOETL_EMBEDDED_WORKERS", base.embedded_workers, 1),
            lease_seconds=_int(env, "NOETL_LEASE_SECONDS", base.lease_seconds, 3),
            reaper_interval_seconds=_float(
                env, "NOETL_REAPER_INTERVAL_SECONDS", base.reaper_interval_seconds
            ),
            issued_grace_seconds=_float(
                env, "NOETL_ISSUED_GRACE_SECONDS", base.issued_grace_seconds
            ),
            max_attempts=_int(env, "NOETL_MAX_ATTEMPTS", base.max_attempts, 1),
            claim_max_attempts=_int(env, "NOETL_CLAIM_MAX_ATTEMPTS", base.claim_max_attempts, 1),
            claim_retry_delay_seconds=_float(
                env, "NOETL_CLAIM_RETRY_DELAY_SECONDS", base.claim_retry_delay_seconds
            ),
            cursor_chain=_int(env, "NOETL_CURSOR_CHAIN", base.cursor_chain, 0),
            wake_grace_seconds=_float(env, "NOETL_WAKE_GRACE_SECONDS", base.wake_grace_seconds),
            execution_timeout_seconds=_float(
                env, "NOETL_EXECUTION_TIMEOUT_SECONDS", base.execution_timeout_seconds
            ),
            schedule_tick_seconds=_float(
                env, "NOETL_SCHEDULE_TICK_SECONDS", base.schedule_tick_seconds
            ),
            orchestrate_batch=_int(env, "NOETL_ORCHESTRATE_BATCH", base.orchestrate_batch, 1),
            batch_size=_batch_size(env, base.batch_size),
            batch_budget_seconds=_float(
                env, "NOETL_BATCH_BUDGET_SECONDS", base.batch_budget_seconds
            ),
            close_window_seconds=_float(
                env, "NOETL_CLOSE_WINDOW_SECONDS", base.close_window_seconds
            ),
            beside_threads=_int(env, "NOETL_BESIDE_THREADS", base.beside_threads),
            http_timeout_seconds=_float(
                env, "NOETL_HTTP_TIMEOUT_SECONDS", base.http_timeout_seconds
            ),
            http_rate_limits=parse_rate_limits(env.get("NOETL_HTTP_RATE_LIMITS", "")),
            http_pacing=_choice(
                env, "NOETL_HTTP_PACING", base.http_pacing, ("on", "process", "off")
            ),
            http_pools=_choice(env, "NOETL_HTTP_POOLS", base.http_pools, ("thread", "process")),
            postgres_max_rows=_int(env, "NOETL_POSTGRES_MAX_ROWS", base.postgres_max_rows, 1),
            max_pipeline_jumps=_int(env, "NOETL_MAX_PIPELINE_JUMPS", base.max_pipeline_jumps, 1),
            max_retry_delay_seconds=_float(
                env, "NOETL_MAX_RETRY_DELAY_SECONDS", base.max_retry_delay_seconds
            ),
            park_after_seconds=_finite(env, "NOETL_PARK_AFTER_SECONDS", base.park_after_seconds),
            throttle_release_seconds=_finite(
                env, "NOETL_THROTTLE_RELEASE_SECONDS", base.throttle_release_seconds
            ),
            wait_poll_seconds=_float(env, "NOETL_WAIT_POLL_SECONDS", base.wait_poll_seconds),
            duckdb_dir=env.get("NOETL_DUCKDB_DIR", "").strip(),
            loop_results_cap=_int(env, "NOETL_LOOP_RESULTS_CAP", base.loop_results_cap, 0),
            default_parallel_window=_int(
                env, "NOETL_DEFAULT_PARALLEL_WINDOW", base.default_parallel_window, 1
            ),
            template_mode=_choice(
                env, "NOETL_TEMPLATE_MODE", base.template_mode, ("strict", "noetl")
            ),
            record_passes=env.get("NOETL_RECORD_PASSES", "").strip(),
            synchronous_commit=_choice(
                env, "NOETL_SYNCHRONOUS_COMMIT", base.synchronous_commit, ("on", "off")
            ),
            db_idle_in_transaction_seconds=_float(
                env, "NOETL_DB_IDLE_IN_TRANSACTION_SECONDS", base.db_idle_in_transaction_seconds
            ),
            db_statement_timeout_seconds=_float(
                env, "NOETL_DB_STATEMENT_TIMEOUT_SECONDS", base.db_statement_timeout_seconds
            ),
            db_pool_size=_int(env, "NOETL_DB_POOL_SIZE", base.db_pool_size, 1),
            db_max_overflow=_int(env, "NOETL_DB_MAX_OVERFLOW", base.db_max_overflow, 0),
            max_payload_bytes=_int(env, "NOETL_MAX_PAYLOAD_BYTES", base.max_payload_bytes, 1),
            log_capture_bytes=_int(env, "NOETL_LOG_CAPTURE_BYTES", base.log_capture_bytes, 0),
            progress_seconds=_float(env, "NOETL_PROGRESS_SECONDS", base.progress_seconds),
            api_token=env.get("NOETL_API_TOKEN", "").strip(),
            api_basic_auth=env.get("NOETL_API_BASIC_AUTH", "").strip(),
            api_cors_origins=_names(env, "NOETL_API_CORS_ORIGINS"),
            api_allowed_hosts=_names(env, "NOETL_API_ALLOWED_HOSTS"),
            notify=notify_settings(env),
            retention_seconds=_retention(env),
            broker_queue_type=_choice(
                env, "NOETL_BROKER_QUEUE_TYPE", base.broker_queue_type, ("classic", "quorum")
            ),
            worker_shutdown_seconds=_finite(
                env, "NOETL_WORKER_SHUTDOWN_SECONDS", base.worker_shutdown_seconds
            ),
            queue_by_kind=parse_queue_by_kind(env.get("NOETL_QUEUE_BY_KIND", "")),
        )
