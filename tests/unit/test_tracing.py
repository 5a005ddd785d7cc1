"""noetl_celery.tracing without a worker: when the standard OTEL_* variables turn
tracing on, the ids derived from an execution, one-line errors for what cannot work,
and the after-commit rule the execution's span relies on (exported once, never after a
rollback)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl_celery import tracing
from noetl_celery.errors import ConfigurationError
from noetl_celery.store.database import Database, after_commit

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _fresh_tracing() -> Iterator[None]:
    """Each test reads the configuration anew, and leaves none cached behind it."""
    tracing.reset()
    yield
    tracing.reset()


@pytest.mark.parametrize(
    ("env", "exporter"),
    [
        ({}, None),  # the default: off
        ({"OTEL_SERVICE_NAME": "x"}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp"),  # the exporter's own default endpoint
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, None),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, None),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, "otlp"),
    ],
)
def test_when_tracing_is_on(env: dict[str, str], exporter: str | None) -> None:
    assert tracing.config_from(env).exporter == exporter


def test_the_service_name_defaults_to_noetl_celery() -> None:
    assert tracing.config_from({}).service_name == "noetl-celery"
    named = tracing.config_from({"OTEL_SERVICE_NAME": "etl-prod", "OTEL_TRACES_EXPORTER": "otlp"})
    assert named.service_name == "etl-prod"


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER='jaeger' is not supported"),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, "is not supported: use otlp, console or none"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTLP protocol 'grpc' is not supported",
        ),
    ],
)
def test_what_cannot_work_is_one_line(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(says)) as caught:
        tracing.config_from(env)
    assert "\n" not in str(caught.value)


def test_a_missing_extra_is_named_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    # as if `noetl-celery[otel]` were not installed: the SDK cannot be imported
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    tracing.reset()
    try:
        with pytest.raises(ConfigurationError, match=r"pip install 'noetl-celery\[otel\]'"):
            tracing.check()
    finally:
        monkeypatch.undo()
        tracing.reset()
    tracing.check()  # off again: nothing to check


def test_ids_are_derived_from_the_execution() -> None:
    trace_id = tracing.trace_id_of("123456789")
    assert re.fullmatch(r"[0-9a-f]{32}", trace_id) and int(trace_id, 16) != 0
    assert trace_id == tracing.trace_id_of("123456789")  # any process, any host
    assert trace_id != tracing.trace_id_of("123456780")
    # the step's span id names the epoch: a step run again is another span
    assert tracing.step_span_int("e", "fetch", 1) != tracing.step_span_int("e", "fetch", 2)
    assert tracing.step_span_int("e", "a", 1) != tracing.execution_span_int("e")
    assert 0 < tracing.execution_span_int("e") < 2**64


def test_off_by_default_every_call_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    tracing.reset()
    assert not tracing.enabled() and tracing.runtime() is None
    with tracing.span("x"):
        tracing.event("retry", {"attempt": 1})
    tracing.step_mark("e", "s", 1, "hand back")
    tracing.flush()


def test_after_commit_runs_once_after_the_commit_and_never_after_a_rollback(
    tmp_path: Path,
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'x.db'}")
    ran: list[str] = []
    with db.write() as conn:
        after_commit(conn, lambda: ran.append("committed"))
        assert ran == []  # not before the commit
    assert ran == ["committed"]
    with pytest.raises(RuntimeError), db.write() as conn:
        after_commit(conn, lambda: ran.append("rolled back"))
        raise RuntimeError("the transaction fails")
    with db.write():
        pass  # the same pooled connection: nothing registered before is left on it
    assert ran == ["committed"]
    db.dispose()
