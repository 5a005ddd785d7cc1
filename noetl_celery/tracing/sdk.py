"""The OpenTelemetry SDK side of `noetl_celery.tracing`: imported only once a process
records its first span with tracing on (the `otel` extra)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from noetl_celery import __version__
from noetl_celery.constants import COMPLETED
from noetl_celery.tracing import (
    MAX_ATTRIBUTE_CHARS,
    Attributes,
    CommandLike,
    ExecutionTimes,
    TraceConfig,
    execution_span_int,
    step_span_int,
    trace_int,
)

if TYPE_CHECKING:
    import datetime as dt


class _Ids(IdGenerator):
    """Random ids, unless the next span's ids were set (`given`): the execution's and its
    steps' spans have ids derived from the execution, so that spans recorded anywhere
    before them can name them as parent."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._next = threading.local()

    @contextmanager
    def given(self, trace_id: int, span_id: int) -> Iterator[None]:
        self._next.trace_id, self._next.span_id = trace_id, span_id
        try:
            yield
        finally:
            self._next.trace_id = self._next.span_id = None

    def generate_span_id(self) -> int:
        given: int | None = getattr(self._next, "span_id", None)
        if given:
            self._next.span_id = None
            return given
        return self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        given: int | None = getattr(self._next, "trace_id", None)
        if given:
            self._next.trace_id = None
            return given
        return self._random.generate_trace_id()


def load_exporter(config: TraceConfig) -> type[SpanExporter]:
    """The exporter's class, imported (the OTLP one pulls in protobuf and an HTTP client)."""
    if config.exporter == "console":
        return ConsoleSpanExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter


def _exporter(config: TraceConfig) -> SpanExporter:
    if config.exporter == "console":
        # stderr: stdout carries what commands like `run --json` answer
        return ConsoleSpanExporter(service_name=config.service_name, out=sys.stderr)
    # endpoint, headers, timeout and compression from the standard OTEL_EXPORTER_OTLP_*
    return load_exporter(config)()


def _ns(when: dt.datetime) -> int:
    # the engine database stores naive UTC times
    import datetime as dt

    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1e9)


def _parent(trace_id: int, span_id: int) -> otel_context.Context:
    """A context whose current span is the (remote, sampled) span of those ids."""
    parent = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(1))
    return trace.set_span_in_context(NonRecordingSpan(parent))


def _short(attributes: Attributes) -> dict[str, object]:
    return {
        key: value[:MAX_ATTRIBUTE_CHARS] if isinstance(value, str) else value
        for key, value in attributes.items()
    }


class Runtime:
    """One process's tracer provider, exporter and batch processor."""

    def __init__(self, config: TraceConfig) -> None:
        self.pid = os.getpid()
        self.ids = _Ids()
        resource = Resource.create(
            {
                "service.name": config.service_name,
                "service.version": __version__,
                "process.pid": self.pid,
            }
        )
        # not the global provider: the process may trace its own things its own way
        self.provider = TracerProvider(resource=resource, id_generator=self.ids)
        self.provider.add_span_processor(BatchSpanProcessor(_exporter(config)))
        self.tracer = self.provider.get_tracer("noetl_celery", __version__)
        self._commands: dict[str, Span] = {}
        self._lock = threading.Lock()

    def flush(self) -> None:
        self.provider.force_flush()

    def shutdown(self) -> None:
        self.provider.shutdown()

    @contextmanager
    def command_span(self, command: CommandLike, resumed: bool) -> Iterator[None]:
        parent = _parent(
            trace_int(command.execution_id),
            step_span_int(command.execution_id, command.step, command.epoch),
        )
        attributes: dict[str, object] = {
            "noetl.execution_id": command.execution_id,
            "noetl.step": command.step,
            "noetl.epoch": command.epoch,
            "noetl.command_id": command.command_id,
            "noetl.command.kind": command.kind,
            "noetl.attempt": command.attempt,
        }
        if command.iteration is not None:
            attributes["noetl.iteration"] = command.iteration
        if resumed:
            attributes["noetl.resumed"] = True
        span = self.tracer.start_span(
            f"command {command.step}",
            context=parent,
            attributes=attributes,  # type: ignore[arg-type]
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        with self._lock:
            self._commands[command.command_id] = span
        try:
            yield
        except BaseException as exc:  # an engine bug: the run crashed
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise
        finally:
            with self._lock:
                self._commands.pop(command.command_id, None)
            otel_context.detach(token)
            span.end()

    @contextmanager
    def child_span(self, name: str, attributes: Attributes, client: bool) -> Iterator[None]:
        current = trace.get_current_span()
        if not current.get_span_context().is_valid:
            yield  # no command span around it (a tool run outside a worker)
            return
        kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
        with self.tracer.start_as_current_span(
            name,
            kind=kind,
            attributes=_short(attributes),  # type: ignore[arg-type]
        ):
            yield

    def set_attributes(self, attributes: Attributes) -> None:
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes(_short(attributes))  # type: ignore[arg-type]

    def failed(self, message: str) -> None:
        span = trace.get_current_span()
        if span.is_recording():
            span.set_status(Status(StatusCode.ERROR, message))

    def event(self, name: str, attributes: Attributes) -> None:
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event(name, _short(attributes))  # type: ignore[arg-type]

    def command_event(self, command_id: str, name: str, attributes: Attributes) -> None:
        # under the lock: the span is taken out of `_commands` before it ends, so a span
        # found here has not ended (another thread's command may end meanwhile)
        with self._lock:
            span = self._commands.get(command_id)
            if span is not None:
                span.add_event(name, _short(attributes))  # type: ignore[arg-type]

    def step_mark(
        self, execution_id: str, step: str, epoch: int, name: str, attributes: Attributes
    ) -> None:
        parent = _parent(trace_int(execution_id), step_span_int(execution_id, step, epoch))
        now = time.time_ns()
        span = self.tracer.start_span(
            name,
            context=parent,
            start_time=now,
            attributes={"noetl.execution_id": execution_id, "noetl.step": step},
        )
        span.add_event(name, _short(attributes), timestamp=now)  # type: ignore[arg-type]
        span.end(end_time=now)

    def ended(self, times: ExecutionTimes) -> None:
        trace_id = trace_int(times.execution_id)
        root = execution_span_int(times.execution_id)
        attributes: dict[str, object] = {
            "noetl.execution_id": times.execution_id,
            "noetl.playbook": times.path,
            "noetl.status": times.status,
        }
        if times.parent_execution_id:
            attributes["noetl.parent_execution_id"] = times.parent_execution_id
        with self.ids.given(trace_id, root):
            span = self.tracer.start_span(
                f"execution {times.path}",
                context=otel_context.Context(),  # the root of its trace
                start_time=_ns(times.started),
                attributes=attributes,  # type: ignore[arg-type]
            )
        if times.status != COMPLETED:
            span.set_status(Status(StatusCode.ERROR, times.status))
        span.end(end_time=_ns(times.ended))
        for step in times.steps:
            step_attributes: dict[str, object] = {
                "noetl.execution_id": times.execution_id,
                "noetl.step": step.step,
                "noetl.epoch": step.epoch,
                "noetl.commands": step.commands,
                "noetl.commands_failed": step.failed,
            }
            with self.ids.given(trace_id, step_span_int(times.execution_id, step.step, step.epoch)):
                child = self.tracer.start_span(
                    f"step {step.step}",
                    context=_parent(trace_id, root),
                    start_time=_ns(step.started),
                    attributes=step_attributes,  # type: ignore[arg-type]
                )
            child.end(end_time=_ns(step.ended))
