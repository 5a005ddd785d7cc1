"""Keyed `rate_limit` on the session's two real worker processes and Postgres, against
a multi-tenant API that enforces its own limit per tenant and measures, server side,
what reached it (tests/support/tenant_api.py)."""

from __future__ import annotations

import itertools
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from noetl_celery.engine.service import Engine
from tests.support.tenant_api import TenantApi, serving

pytestmark = pytest.mark.integration

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: keyed_throttle_it}
workload: {api: "", items: [], hold: 0, run: ""}
workflow:
  - step: fetch
    loop: {in: "{{ items }}", iterator: it, spec: {mode: parallel, max_in_flight: 12}}
    tool:
      kind: http
      url: "{{ api }}/t/{{ iter.it.t }}/items/{{ iter.it.n }}"
      params: {hold: "{{ hold }}"}
      rate_limit:
        key: "{{ run }}-{{ iter.it.t }}"
        per_second: "{{ iter.it.rate }}"
        concurrency: "{{ iter.it.slots }}"
      spec:
        policy:
          rules:
            - when: "{{ output.status == 'error' }}"
              then: {do: retry, attempts: 30, delay: 0.2}
"""


@pytest.fixture
def api() -> Iterator[TenantApi]:
    # a: no rate to speak of (concurrency is what binds); b: 5/s, no burst
    with serving({"a": (1000.0, 1000.0), "b": (5.0, 1.0)}) as served:
        yield served


def _run(engine: Engine, api: TenantApi, items: list[dict[str, Any]], hold: float) -> None:
    payload = {"api": api.base, "items": items, "hold": hold, "run": uuid.uuid4().hex[:8]}
    eid = engine.start_text(PLAYBOOK, payload)
    row = engine.wait(eid, 180)
    assert row.status == "COMPLETED", row.error
    stats = engine.summary(eid)["steps"]["fetch"]["stats"]
    assert stats["success"] == len(items) and stats["failed"] == 0, stats


def test_concurrency_per_key_is_never_exceeded_across_two_workers(
    engine_on_workers: Engine, api: TenantApi
) -> None:
    # four worker slots in all (two processes of two): unlimited, four requests of
    # tenant a would be in flight at once; the key allows two
    items = [{"t": "a", "n": n, "rate": 1000, "slots": 2} for n in range(16)]
    _run(engine_on_workers, api, items, hold=0.3)
    seen = api.stats()["a"]
    assert seen["max_in_flight"] == 2, seen["max_in_flight"]
    assert sorted(seen["items"]) == sorted(str(n) for n in range(16))
    assert set(seen["items"].values()) == {1}  # each item accepted once
    held = engine_on_workers.store.throttle.held()
    assert not any(key.endswith("-a") for key in held), held  # every slot given back


def test_a_keys_rate_holds_across_two_workers(engine_on_workers: Engine, api: TenantApi) -> None:
    items = [{"t": "b", "n": n, "rate": 5, "slots": 100} for n in range(25)]
    _run(engine_on_workers, api, items, hold=0.0)
    seen = api.stats()["b"]
    accepted = sorted(seen["accepted"])
    assert len(accepted) == 25 and set(seen["items"].values()) == {1}
    # the rate the server accepted, from the typical gap between two accepted requests
    # (a retried 429 at the end stretches the whole span, not the gaps)
    gaps = [b - a for a, b in itertools.pairwise(accepted)]
    rate = 1.0 / statistics.median(gaps)
    assert 4.0 <= rate <= 5.5, rate
    assert len(seen["refused"]) <= 8, len(seen["refused"])


def test_the_api_metrics_and_page_show_a_keys_state(
    engine_on_workers: Engine, api: TenantApi, served: Any
) -> None:
    run = uuid.uuid4().hex[:8]
    # 2/s: of the four bodies the two workers run at once, the later ones' turns are
    # more than a second away, so they park
    items = [{"t": "b", "n": n, "rate": 2, "slots": 1} for n in range(12)]
    payload = {"api": api.base, "items": items, "hold": 0.1, "run": run}
    eid = engine_on_workers.start_text(PLAYBOOK, payload)
    key = f"{run}-b"
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    status = engine_on_workers.store.execution_status
    while status(eid) == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.1)
        answer = httpx.get(f"{served.url}/api/v1/rate-limits", timeout=10).json()
        seen += [r for r in answer["rate_limits"] if r["key"] == key]
    assert engine_on_workers.wait(eid, 60).status == "COMPLETED"
    assert seen, "the key never showed"
    assert {r["declared"] for r in seen} == {2.0}
    assert max(r["in_flight"] for r in seen) == 1  # its one slot, never more
    assert max(r["waiting"] for r in seen) >= 1  # commands parked for a turn or the slot
    assert max(r["current_rate"] for r in seen) > 0
    metrics = httpx.get(f"{served.url}/metrics", timeout=10).text
    assert f'noetl_rate_limit_declared{{key="{key}"}} 2.0' in metrics
    page = httpx.get(f"{served.url}/rate-limits", timeout=10).text
    assert f'data-key="{key}"' in page
