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
from sqlalchemy import text

from noetl_celery.engine.retention import Pruner
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


@pytest.fixture
def mixed_api() -> Iterator[TenantApi]:
    # s: slow, 0.5/s, no burst; f: fast, 10/s
    with serving({"s": (0.5, 1.0), "f": (10.0, 2.0)}) as served:
        yield served


def test_a_loop_mixing_keys_runs_its_fast_key_at_its_own_pace(
    engine_on_workers: Engine, mixed_api: TenantApi
) -> None:
    """One loop, one item of each key in turn: the slow key's items park for their
    turns (seconds away) and give their window slots back (`item.throttled`), so the
    window (4) refills with the fast key's items instead of filling with parked slow
    ones; the fast key's 60 items run at its 10/s while the slow key's 12 take 22 s."""
    slow = [{"t": "s", "n": n, "rate": 0.5, "slots": 100} for n in range(12)]
    fast = [{"t": "f", "n": n, "rate": 10, "slots": 100} for n in range(60)]
    mixed = [i for pair in itertools.zip_longest(slow, fast) for i in pair if i is not None]
    payload = {"api": mixed_api.base, "items": mixed, "hold": 0.0, "run": uuid.uuid4().hex[:8]}
    eid = engine_on_workers.start_text(
        PLAYBOOK.replace("max_in_flight: 12", "max_in_flight: 4"), payload
    )
    row = engine_on_workers.wait(eid, 180)
    assert row.status == "COMPLETED", row.error
    stats = engine_on_workers.summary(eid)["steps"]["fetch"]["stats"]
    assert stats == {"total": 72, "success": 72, "failed": 0}, stats
    seen = mixed_api.stats()
    for tenant, count in (("s", 12), ("f", 60)):
        assert sorted(seen[tenant]["items"]) == sorted(str(n) for n in range(count))
        assert set(seen[tenant]["items"].values()) == {1}  # each item accepted once
    started = min(seen["s"]["accepted"] + seen["f"]["accepted"])
    fast_done = max(seen["f"]["accepted"]) - started
    slow_done = max(seen["s"]["accepted"]) - started
    # held to the slow key's pace (the window full of parked slow items) the fast key's
    # first 12 items would go one per slow completion, the last after the 8th (14 s),
    # then its other 48 (5 s): about 19 s; at its own pace, 60 items take about 6 s
    assert fast_done < 11.0, (fast_done, slow_done)
    assert slow_done >= 20.0, slow_done
    throttled = engine_on_workers.store.history.events_after(eid, types=("item.throttled",))
    assert throttled.rows, "no item gave its window slot back"


def test_a_pruned_idle_key_is_declared_again_by_its_next_booking(
    engine_on_workers: Engine, api: TenantApi
) -> None:
    """The prune removes a rate_limit key's pacing row idle past its age while both
    worker processes still cache that they declared the key: their next bookings
    re-create it at the declared ceiling and pace at it (a booking that found no row
    would send unpaced: two requests at once where the key allows one per 0.5 s)."""
    run = uuid.uuid4().hex[:8]
    key = f"key:{run}-b"
    engine = engine_on_workers
    engine.store.pacing.declare("idle-host.example:443", 3.0)  # a host's row: never pruned

    def drain(first: int) -> list[float]:
        items = [{"t": "b", "n": n, "rate": 2, "slots": 100} for n in range(first, first + 6)]
        payload = {"api": api.base, "items": items, "hold": 0.0, "run": run}
        eid = engine.start_text(PLAYBOOK, payload)
        assert engine.wait(eid, 120).status == "COMPLETED"
        return sorted(api.stats()["b"]["accepted"])[first:]

    def pace_row() -> list[Any]:
        with engine.store.db.read() as conn:
            return list(
                conn.execute(
                    text("SELECT host, ceiling FROM http_pace WHERE host IN (:k, :h)"),
                    {"k": key, "h": "idle-host.example:443"},
                ).all()
            )

    drain(0)
    assert sorted(pace_row()) == [("idle-host.example:443", 3.0), (key, 2.0)]
    time.sleep(2.5)  # the key's last slot is now more than a second old: idle
    report = Pruner(engine.store).prune(1.0)
    assert report.idle_keys >= 1
    assert pace_row() == [("idle-host.example:443", 3.0)]  # the key's row went, the host's stayed
    accepted = drain(6)  # the worker processes still cache the key's declaration
    assert pace_row() == [("idle-host.example:443", 3.0), (key, 2.0)]
    gaps = [b - a for a, b in itertools.pairwise(accepted)]
    assert len(accepted) == 6 and min(gaps) >= 0.35, gaps  # paced at 2/s from the first
