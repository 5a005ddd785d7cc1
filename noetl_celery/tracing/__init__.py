"""OpenTelemetry traces of executions (docs/operations/tracing.md), off by default.

Every span of one execution belongs to one trace whose id is derived from the execution
id (`trace_id_of`), so the processes and hosts that run its commands add spans to the
same trace without passing a context through the broker (which holds nothing
authoritative). The execution's span and its steps' spans have derived span ids too:
a command's span names its step's span as parent before that span exists. Those long
spans are exported once, when the execution ends, by the process whose transaction
ended it, after that transaction committed (`ended_after_commit`); a command's span is
exported when its run ends, by the process that ran it.

This module is the façade: it never imports OpenTelemetry itself, and every call is a
cheap no-op while tracing is off (`enabled()` is read once per process from the
standard `OTEL_*` variables, see `config_from`). The SDK is imported by
`tracing.sdk` the first time a process records a span.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from noetl_celery.errors import ConfigurationError

if TYPE_CHECKING:
    import datetime as dt

    from noetl_celery.tracing.sdk import Runtime

log = logging.getLogger("noetl_celery.tracing")

DEFAULT_SERVICE_NAME = "noetl-celery"
EXPORTERS = ("otlp", "console")
# attribute values of events are kept short: a span is not a log
MAX_ATTRIBUTE_CHARS = 512

AttributeValue = str | bool | int | float | Sequence[str]
Attributes = Mapping[str, AttributeValue]


@dataclass(frozen=True)
class TraceConfig:
    exporter: str | None  # otlp | console; None: tracing is off
    service_name: str = DEFAULT_SERVICE_NAME


def config_from(env: Mapping[str, str]) -> TraceConfig:
    """Whether and how to trace, from the standard variables. On when
    `OTEL_TRACES_EXPORTER` names `otlp` or `console`, or when it is unset and
    `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set; off
    with `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` (the default: no
    variable set). Raises ConfigurationError for what cannot work."""
    service = env.get("OTEL_SERVICE_NAME", "").strip() or DEFAULT_SERVICE_NAME
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return TraceConfig(None, service)
    named = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if named:
        # the standard allows a list; one exporter is what a worker needs
        choices = [part.strip() for part in named.split(",") if part.strip()]
        if choices == ["none"]:
            return TraceConfig(None, service)
        if len(choices) != 1 or choices[0] not in EXPORTERS:
            raise ConfigurationError(
                f"OTEL_TRACES_EXPORTER={named!r} is not supported: use otlp, console or none"
            )
        exporter: str | None = choices[0]
    elif env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        exporter = "otlp"
    else:
        return TraceConfig(None, service)
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or ""
    ).strip()
    if exporter == "otlp" and protocol not in ("", "http/protobuf"):
        raise ConfigurationError(
            f"OTLP protocol {protocol!r} is not supported: noetl-celery exports traces "
            "over http/protobuf (port 4318); set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"
        )
    return TraceConfig(exporter, service)


_config: TraceConfig | None = None
_runtime: Runtime | None = None
_lock = threading.Lock()


def config() -> TraceConfig:
    """This process's configuration (read once; `reset` reads it again)."""
    global _config
    if _config is None:
        _config = config_from(os.environ)
    return _config


def enabled() -> bool:
    return config().exporter is not None


def check() -> None:
    """Fail at start, with one line, when tracing is asked for but cannot work: a bad
    `OTEL_*` value, or the `otel` extra not installed."""
    if not enabled():
        return
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise ConfigurationError(
            f"tracing is on (OTEL_* variables) but OpenTelemetry is not installed ({exc}): "
            "pip install 'noetl-celery[otel]', or unset OTEL_TRACES_EXPORTER and "
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        ) from exc


def preload() -> None:
    """Import the SDK and the exporter now (tracing on only): in a prefork parent,
    before the fork, so each pool process does not pay the import (about 0.4 s of CPU)
    at its first command; its provider is still made after the fork (`runtime`)."""
    if enabled():
        from noetl_celery.tracing.sdk import load_exporter

        load_exporter(config())


def runtime() -> Runtime | None:
    """The process's tracer, built on first use in each process (after a fork too: a
    span processor's thread does not survive one); None while tracing is off."""
    global _runtime
    if not enabled():
        return None
    current = _runtime
    if current is not None and current.pid == os.getpid():
        return current
    with _lock:
        if _runtime is None or _runtime.pid != os.getpid():
            from noetl_celery.tracing.sdk import Runtime

            _runtime = Runtime(config())
        return _runtime


def flush() -> None:
    """Export what this process's spans are waiting to be sent (at shutdown)."""
    current = _runtime
    if current is not None and current.pid == os.getpid():
        current.flush()


def shutdown() -> None:
    global _runtime
    with _lock:
        current, _runtime = _runtime, None
    if current is not None and current.pid == os.getpid():
        current.shutdown()


def reset() -> None:
    """Read the configuration again and drop this process's tracer (tests, forks)."""
    global _config
    shutdown()
    _config = None


# ---- identities --------------------------------------------------------------------------


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x1f".join(("noetl-celery", *parts)).encode()).digest()


def trace_int(execution_id: str) -> int:
    return int.from_bytes(_digest("trace", execution_id)[:16], "big") or 1


def trace_id_of(execution_id: str) -> str:
    """The execution's trace id as trace viewers show it (32 hex digits): the first 128
    bits of SHA-256 over `noetl-celery`, `trace` and the execution id."""
    return f"{trace_int(execution_id):032x}"


def execution_span_int(execution_id: str) -> int:
    return int.from_bytes(_digest("execution", execution_id)[:8], "big") or 1


def step_span_int(execution_id: str, step: str, epoch: int) -> int:
    return int.from_bytes(_digest("step", execution_id, step, str(epoch))[:8], "big") or 1


# ---- spans -------------------------------------------------------------------------------


class CommandLike(Protocol):
    @property
    def command_id(self) -> str: ...
    @property
    def execution_id(self) -> str: ...
    @property
    def step(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def epoch(self) -> int: ...
    @property
    def iteration(self) -> int | None: ...
    @property
    def attempt(self) -> int: ...


@contextmanager
def command_span(command: CommandLike, resumed: bool = False) -> Iterator[None]:
    """A span for one run of a command, child of its step's span; the tool calls and
    requests made meanwhile are its children, the pipeline's retries its events."""
    rt = runtime()
    if rt is None:
        yield
        return
    with rt.command_span(command, resumed):
        yield


@contextmanager
def span(name: str, attributes: Attributes | None = None, client: bool = False) -> Iterator[None]:
    """A child of the current span (a tool call, an HTTP request); nothing without one."""
    rt = runtime()
    if rt is None:
        yield
        return
    with rt.child_span(name, attributes or {}, client):
        yield


def set_attributes(attributes: Attributes) -> None:
    """On the current span (the innermost `span` or `command_span`)."""
    rt = runtime()
    if rt is not None:
        rt.set_attributes(attributes)


def failed(message: str) -> None:
    """Mark the current span failed (status ERROR, with the message)."""
    rt = runtime()
    if rt is not None:
        rt.failed(message[:MAX_ATTRIBUTE_CHARS])


def event(name: str, attributes: Attributes | None = None) -> None:
    """An event on the current span: a pacer's wait, a retry, a parked command."""
    rt = runtime()
    if rt is not None:
        rt.event(name, attributes or {})


def command_event(command_id: str, name: str, attributes: Attributes | None = None) -> None:
    """An event on the span of a command this process runs now, from any thread (the
    batch watchdog's hand-back); nothing when it runs none by that id."""
    rt = runtime()
    if rt is not None:
        rt.command_event(command_id, name, attributes or {})


def step_mark(
    execution_id: str,
    step: str,
    epoch: int,
    name: str,
    attributes: Attributes | None = None,
) -> None:
    """A moment of a step outside any command's run (a hand-back, a lease that expired):
    a zero-length span under the step's span, with the moment as its event."""
    rt = runtime()
    if rt is not None:
        rt.step_mark(execution_id, step, epoch, name, attributes or {})


@dataclass(frozen=True)
class StepTimes:
    step: str
    epoch: int
    started: dt.datetime
    ended: dt.datetime
    commands: int
    failed: int


@dataclass(frozen=True)
class ExecutionTimes:
    execution_id: str
    path: str
    status: str
    started: dt.datetime
    ended: dt.datetime
    parent_execution_id: str | None
    steps: list[StepTimes]


def ended(times: ExecutionTimes) -> None:
    """Export the execution's span and its steps' spans (once: see `ended_after_commit`)."""
    rt = runtime()
    if rt is not None:
        rt.ended(times)
