"""OpenTelemetry traces (noetl_celery.tracing) from real worker processes, exported to
an in-process OTLP receiver (tests/support/otlp_receiver.py).

Each test has a database and a Redis of its own and prefork workers (spans recorded in
forked pool processes) started with the standard `OTEL_*` variables, or without them.
The playbook's http step asks a local API that answers 429 with `Retry-After: 1` to the
first two requests of each item; the pipeline retries, its wait capped at 0.2 s
(`NOETL_MAX_RETRY_DELAY_SECONDS`), and the API's host is declared at one request a second
(`NOETL_HTTP_RATE_LIMITS`), so the retried requests also wait their turn in the http
pacer.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from noetl_celery import tracing
from noetl_celery.engine.service import Engine
from tests.conftest import _env
from tests.support import services
from tests.support.engines import celery_engine
from tests.support.http_server import http_api, stats
from tests.support.otlp_receiver import Receiver, Span, otlp_receiver, tree
from tests.support.private_services import PrivateRedis
from tests.support.workers import BeatProcess, WorkerProcess

pytestmark = pytest.mark.integration

# a lost command is re-issued within seconds (tests/integration/test_threads_pool.py too)
FAST_RECOVERY = {
    "NOETL_LEASE_SECONDS": "4",
    "NOETL_REAPER_INTERVAL_SECONDS": "1",
    "NOETL_ISSUED_GRACE_SECONDS": "3",
    "NOETL_WAKE_GRACE_SECONDS": "2",
}

THROTTLED_LOOP = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: traced_throttle, path: tests/traced_throttle}
workload: {times: 2, after: 1}
workflow:
  - step: start
    tool: {kind: python, code: "result = {'names': ['a', 'b']}"}
    next: {arcs: [{step: fetch}]}
  - step: fetch
    loop:
      in: "{{ start.names }}"
      iterator: key
    tool:
      - name: get
        kind: http
        method: GET
        url: "{{ api }}/throttle/{{ iter.key }}?times={{ times }}&after={{ after }}&token=s3cret"
        spec:
          policy:
            rules:
              - when: "{{ output.status == 'error' }}"
                then: {do: retry, attempts: 5, backoff: fixed, delay: 0.1}
    next: {arcs: [{step: end, when: "{{ event.name == 'loop.done' }}"}]}
  - step: end
    tool: {kind: python, code: "result = {'done': True}"}
"""


@dataclass
class Fleet:
    engine: Engine
    dsn: str
    workers: list[WorkerProcess]

    def command_ids(self, eid: str) -> dict[str, str]:
        """command id -> status, of every command the execution had."""
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT command_id, status FROM commands WHERE execution_id = %s", (eid,)
            ).fetchall()
        return {str(r[0]): str(r[1]) for r in rows}


@pytest.fixture
def fleet(
    template_db: str, credentials_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Fleet]]:
    """`make(otel_env, api)`: a database, a Redis, two prefork workers (-c 2; `count`)
    with `otel_env` (and `extra`), pacing `api`'s host at 1/s, and a beat with `beat`;
    the test process (whose engine may run a pass too) gets the same variables."""
    with ExitStack() as stack:
        redis = PrivateRedis()
        redis.start()
        stack.callback(redis.stop)
        name = stack.enter_context(services.cloned_database(template_db, prefix="noetl_trace"))
        url = services.sqlalchemy_url(name)

        def make(
            otel_env: dict[str, str],
            api: str,
            count: int = 2,
            beat: bool = False,
            extra: dict[str, str] | None = None,
        ) -> Fleet:
            for key, value in otel_env.items():
                monkeypatch.setenv(key, value)
            tracing.reset()
            stack.callback(tracing.reset)  # flushed and forgotten before the env is undone
            env = _env(
                NOETL_DATABASE_URL=url,
                NOETL_BROKER_URL=redis.url,
                NOETL_CREDENTIALS_FILE=str(credentials_file),
                NOETL_HOME=str(tmp_path / "home"),
                NOETL_MAX_RETRY_DELAY_SECONDS="0.2",
                NOETL_HTTP_RATE_LIMITS=f"{api.split('//')[1]}=1",
                **otel_env,
                **(extra or {}),
            )
            workers = [WorkerProcess(f"trace{i}", env, 2) for i in range(1, count + 1)]
            if beat:
                workers.append(BeatProcess(env))
            for worker in workers:
                stack.callback(worker.stop)
            for worker in workers:
                worker.wait_ready()
            engine = celery_engine(url, redis.url, tmp_path, credentials_file)
            stack.callback(engine.close)
            return Fleet(engine, services.dsn_for(name), workers)

        yield make


def _otel(receiver: Receiver) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": "noetl-trace-test",
        # export within 0.1 s of a span's end, not the default 5 s
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }


def _by_id(spans: list[Span]) -> dict[str, Span]:
    return {s.span_id: s for s in spans}


def _children(spans: list[Span], parent: Span) -> list[Span]:
    return sorted((s for s in spans if s.parent_id == parent.span_id), key=lambda s: s.start_ns)


def test_one_trace_per_execution_with_429_retries_and_pacer_waits(
    fleet: Callable[..., Fleet],
) -> None:
    with otlp_receiver() as receiver, http_api() as api:
        cluster = fleet(_otel(receiver), api)
        eid = cluster.engine.start_text(THROTTLED_LOOP, {"api": api})
        row = cluster.engine.wait(eid, 90)
        served = stats()
        assert row.status == "COMPLETED", row.error
        commands = cluster.command_ids(eid)
        trace_id = tracing.trace_id_of(eid)
        # what an operator searches a trace viewer for: in `status --json` and `logs`
        assert cluster.engine.status(eid)["trace_id"] == trace_id
        blocks, _ = cluster.engine.logs_page(eid)
        assert blocks and {b["trace_id"] for b in blocks} == {trace_id}

        def complete(spans: list[Span]) -> bool:
            names = [s.name for s in spans if s.trace_id == trace_id]
            runs = [s for s in spans if s.name.startswith("command ")]
            return "execution tests/traced_throttle" in names and len(runs) >= len(commands)

        receiver.wait_for("the execution's spans", complete)
        time.sleep(0.5)  # anything exported late (a duplicate) is seen too
        spans = receiver.snapshot()
    assert (served["throttle:a:429"], served["throttle:a:200"]) == (2, 1)

    # one trace: every span recorded for the execution, in any process, carries its id
    assert {s.trace_id for s in spans} == {trace_id}
    assert {s.service for s in spans} == {"noetl-trace-test"}
    root = [s for s in spans if s.parent_id == ""]
    assert [s.name for s in root] == ["execution tests/traced_throttle"]
    assert root[0].span_id == f"{tracing.execution_span_int(eid):016x}"
    assert root[0].attributes["noetl.status"] == "COMPLETED"

    # execution -> step (once each, derived ids) -> command runs (exactly one per command)
    steps = {s.attributes["noetl.step"]: s for s in _children(spans, root[0])}
    assert sorted(steps) == ["end", "fetch", "start"]
    assert all(s.name == f"step {k}" for k, s in steps.items())
    for step, span in steps.items():
        epoch = span.attributes["noetl.epoch"]
        assert span.span_id == f"{tracing.step_span_int(eid, step, epoch):016x}"
        assert span.start_ns <= span.end_ns
    runs = [s for s in spans if s.name.startswith("command ")]
    ran = sorted(s.attributes["noetl.command_id"] for s in runs)
    assert ran == sorted(commands), "one span per command run, none twice"
    ids = _by_id(spans)
    for run in runs:
        assert ids[run.parent_id] is steps[run.attributes["noetl.step"]]
    assert len({s.pid for s in runs}) >= 1 and None not in {s.pid for s in runs}

    # the item `a`: its 429 answers, the pipeline's retries and the pacer's waits
    item = next(
        s
        for s in runs
        if s.attributes["noetl.step"] == "fetch" and s.attributes["noetl.iteration"] == 0
    )
    retries = [e for e in item.events if e.name == "retry"]
    assert [e.attributes["attempt"] for e in retries] == [1, 2]
    for retry in retries:
        assert retry.attributes["reason"] == "rate_limit"
        assert retry.attributes["http.status_code"] == 429
        assert retry.attributes["retry_after_seconds"] == 1
        assert retry.attributes["delay_seconds"] == pytest.approx(0.2)
    tools = _children(spans, item)
    assert [t.name for t in tools] == ["tool http"] * 3
    requests = [_children(spans, t) for t in tools]
    assert [[r.name for r in rs] for rs in requests] == [["HTTP GET"]] * 3
    codes = [rs[0].attributes["http.response.status_code"] for rs in requests]
    assert codes == [429, 429, 200]
    assert [rs[0].status_code for rs in requests] == [2, 2, 0]  # the 429s are errors
    url = requests[0][0].attributes["url.full"]
    assert url.startswith(api) and url.endswith("/throttle/a")  # no query (token=s3cret)
    assert "s3cret" not in repr([s.attributes for s in spans])
    waits = [e for t in tools for e in t.events if e.name == "pacer.wait"]
    assert waits, "the retried request waited in the pacer for the host's Retry-After"
    assert all(e.attributes["host"] == api.split("//")[1] for e in waits)
    # the rest of the server's second after the 0.2 s retry delay
    assert max(e.attributes["wait_seconds"] for e in waits) > 0.3
    assert item.attributes["noetl.outcome"] == "ok" and item.status_code != 2
    shown = tree(spans)
    print(shown)  # the trace as a viewer shows it (pytest -s)
    assert shown.startswith("execution tests/traced_throttle [")
    assert "\n  step fetch [" in shown and "\n    command fetch [" in shown


def test_nothing_is_exported_when_tracing_is_off(
    fleet: Callable[..., Fleet],
) -> None:
    with otlp_receiver() as receiver, http_api() as api:
        cluster = fleet({}, api)  # no OTEL_* variable: the default
        assert not tracing.enabled()
        eid = cluster.engine.start_text(THROTTLED_LOOP, {"api": api, "times": 1})
        row = cluster.engine.wait(eid, 90)
        assert row.status == "COMPLETED", row.error
        time.sleep(1.0)  # ten times the schedule delay the traced test uses
        for worker in cluster.workers:
            worker.stop()  # a flush at shutdown would send what was held
        assert receiver.posts == 0 and receiver.snapshot() == []


LOST = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: traced_lost, path: tests/traced_lost}
workload: {marker: ""}
workflow:
  - step: slow
    tool:
      kind: python
      input: {marker: "{{ marker }}"}
      code: |
        import os, time
        first = not os.path.exists(marker)
        if first:
            open(marker, "w").close()
            time.sleep(120)
        result = {"first": first}
"""


def test_a_lease_that_expired_is_marked_under_its_step(
    fleet: Callable[..., Fleet], tmp_path: Path
) -> None:
    """kill -9 while the command runs: the reaper re-issues it once its lease expired
    (`lease expired` under the step, naming both attempts), the second attempt's run is
    the command span the trace keeps; the killed run's span died with its process."""
    with otlp_receiver() as receiver, http_api() as api:
        cluster = fleet(_otel(receiver), api, count=1, beat=True, extra=FAST_RECOVERY)
        marker = tmp_path / "ran-once"
        eid = cluster.engine.start_text(LOST, {"marker": str(marker)})
        first = f"{eid}:slow:1"
        deadline = time.monotonic() + 30
        while not marker.exists():  # the first run is inside its code, sleeping
            assert time.monotonic() < deadline, cluster.workers[0].tail()
            time.sleep(0.05)
        worker = cluster.workers[0]
        worker.kill(signal.SIGKILL)
        worker.restart()
        row = cluster.engine.wait(eid, 60)
        assert row.status == "COMPLETED", row.error
        assert cluster.engine.summary(eid)["result"] == {"first": False}
        trace_id = tracing.trace_id_of(eid)
        spans = receiver.wait_for(
            "the execution's spans",
            lambda got: any(s.name == "execution tests/traced_lost" for s in got),
        )
    spans = [s for s in spans if s.trace_id == trace_id]
    [step] = [s for s in spans if s.name == "step slow"]
    [mark] = [s for s in spans if s.name == "lease expired"]
    assert mark.parent_id == step.span_id and mark.start_ns == mark.end_ns
    [event] = mark.events
    assert event.name == "lease expired"
    assert event.attributes["command_id"] == first and event.attributes["attempt"] == 1
    again = event.attributes["reissued_as"]
    assert again != first and again.startswith(first)
    runs = [s for s in spans if s.name == "command slow"]
    assert [(r.attributes["noetl.command_id"], r.attributes["noetl.attempt"]) for r in runs] == [
        (again, 2)
    ]
    assert runs[0].parent_id == step.span_id
