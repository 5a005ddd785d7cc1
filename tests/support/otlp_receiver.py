"""An in-process OTLP/HTTP trace receiver for the tracing tests: a threaded http.server
on 127.0.0.1 (a free port) that accepts `POST /v1/traces` (protobuf, gzip or not),
decodes each body as an `ExportTraceServiceRequest` and keeps its spans flattened."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@dataclass(frozen=True)
class Event:
    name: str
    attributes: dict[str, Any]
    time_ns: int


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[Event]
    status_code: int  # 0 unset, 1 ok, 2 error
    service: str
    pid: int | None


@dataclass
class Receiver:
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    spans: list[Span] = field(default_factory=list)
    posts: int = 0

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        Span(
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            name=span.name,
                            kind=span.kind,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            events=[
                                Event(
                                    e.name,
                                    {a.key: _value(a.value) for a in e.attributes},
                                    e.time_unix_nano,
                                )
                                for e in span.events
                            ],
                            status_code=span.status.code,
                            service=str(resource.get("service.name", "")),
                            pid=resource.get("process.pid"),
                        )
                    )
        with self.lock:
            self.posts += 1
            self.spans.extend(found)

    def snapshot(self) -> list[Span]:
        with self.lock:
            return list(self.spans)

    def wait_for(
        self, what: str, check: Callable[[list[Span]], bool], timeout: float = 30
    ) -> list[Span]:
        deadline = time.monotonic() + timeout
        while True:
            spans = self.snapshot()
            if check(spans):
                return spans
            assert time.monotonic() < deadline, f"{what}: not after {timeout}s ({len(spans)} spans)"
            time.sleep(0.05)


def tree(spans: list[Span]) -> str:
    """The spans as an indented tree (children by start time), each with its duration,
    its key attributes and its events: how a trace viewer would show the trace."""
    known = {s.span_id for s in spans}
    children: dict[str, list[Span]] = {}
    for span in spans:
        parent = span.parent_id if span.parent_id in known else ""
        children.setdefault(parent, []).append(span)
    shown = ("noetl.iteration", "noetl.attempt", "http.response.status_code", "url.full")
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s.start_ns):
            ms = (span.end_ns - span.start_ns) / 1e6
            attrs = " ".join(f"{k}={span.attributes[k]}" for k in shown if k in span.attributes)
            error = " ERROR" if span.status_code == 2 else ""
            lines.append(f"{'  ' * depth}{span.name} [{ms:.0f} ms]{error} {attrs}".rstrip())
            for event in span.events:
                at = (event.time_ns - span.start_ns) / 1e6
                detail = " ".join(f"{k}={v}" for k, v in event.attributes.items())
                lines.append(f"{'  ' * (depth + 1)}* {event.name} @{at:.0f} ms {detail}")
            walk(span.span_id, depth + 1)

    walk("", 0)
    return "\n".join(lines)


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """Yield a running receiver; `receiver.url` is its base (OTEL_EXPORTER_OTLP_ENDPOINT)."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/traces":
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            receiver.add(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
