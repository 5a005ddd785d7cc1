"""Quarantine and redrive under SIGKILL (issue 35 item 2): workers are killed while a
loop quarantines its poisoned items and again while the redrive runs them; every item
is still counted once across both executions, each quarantined item is recorded once
and redriven once."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chaos.conftest import Cluster
from tests.chaos.test_chaos import kill_workers

pytestmark = pytest.mark.chaos

N = 1500
BAD = list(range(37, N, 75))  # 20 poisoned items, spread over the loop
POISONED = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: chaos_quarantine, path: tests/chaos_quarantine}
workload: {n: 1500, bad: [], pause: 0.01}
workflow:
  - step: each
    loop:
      in: "{{ range(n) | list }}"
      iterator: x
      spec: {mode: parallel, max_in_flight: 40}
    tool:
      kind: python
      input: {x: "{{ iter.x }}", bad: "{{ bad }}", pause: "{{ pause }}"}
      code: |
        import time
        time.sleep(pause)
        assert x not in bad, f"item {x} is poisoned"
        result = x
      spec:
        policy:
          rules:
            - when: "{{ output.status == 'error' }}"
              then: {do: quarantine}
"""


def marks(cluster: Cluster, eid: str, kind: str) -> int:
    return int(
        cluster.query(
            "SELECT count(*) FROM events WHERE execution_id = %s AND type = %s", eid, kind
        )[0][0]
    )


def test_worker_sigkill_during_quarantine_and_redrive(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory()
    engine = cluster.engine
    eid = engine.start_text(POISONED, {"n": N, "bad": BAD})
    kill_workers(cluster, eid, (300, 900))
    assert cluster.wait(eid) == "COMPLETED"
    first = engine.summary(eid)["steps"]["each"]["stats"]
    assert first == {"total": N, "success": N - len(BAD), "failed": 0, "quarantined": len(BAD)}
    assert marks(cluster, eid, "item.quarantined") == len(BAD)
    listed = engine.quarantine(eid)["items"]
    assert sorted(i["item"] for i in listed) == BAD
    # fixed by the payload, slowed so that a worker dies while the redrive runs
    redrive = engine.redrive(eid, overrides={"bad": [], "pause": 0.5})
    kill_workers(cluster, redrive, (5,))
    assert cluster.wait(redrive) == "COMPLETED"
    second = engine.summary(redrive)["steps"]["each"]["stats"]
    assert second == {"total": len(BAD), "success": len(BAD), "failed": 0}
    assert first["success"] + second["success"] == N  # every item counted once
    assert marks(cluster, eid, "item.redriven") == len(BAD)
    assert {i["redriven_by"] for i in engine.quarantine(eid)["items"]} == {redrive}
    assert engine.store.execution(redrive).rerun_of == eid


ROWS = 1200
BAD_ROWS = list(range(29, ROWS + 1, 60))  # 20 poisoned rows
# A cursor drains a queue (kept by `queue`, which the redrive inherits with the payload);
# a poisoned row's body fails (every statement of it: the postgres tool runs them all)
# and is quarantined, its row left `claimed`
POISONED_CURSOR = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: chaos_cursor_quarantine, path: tests/chaos_cursor_quarantine}
workload: {queue: q, n: 1200, bad: [], pause: 0}
workflow:
  - step: setup
    tool:
      kind: postgres
      auth: pg_test
      command: |
        CREATE TABLE IF NOT EXISTS public.chaos_q_queue (
          queue text, id int, status text, PRIMARY KEY (queue, id));
        CREATE TABLE IF NOT EXISTS public.chaos_q_done (
          queue text, id int, PRIMARY KEY (queue, id));
        INSERT INTO public.chaos_q_queue
        SELECT '{{ queue }}', g, 'pending' FROM generate_series(1, {{ n }}) g;
    next: {arcs: [{step: drain}]}
  - step: drain
    loop:
      cursor:
        kind: postgres
        auth: pg_test
        claim: |
          WITH c AS (
            SELECT id FROM public.chaos_q_queue
            WHERE queue = '{{ queue }}' AND status = 'pending'
            ORDER BY id FOR UPDATE SKIP LOCKED LIMIT {{ __frame_max_rows }})
          UPDATE public.chaos_q_queue q SET status = 'claimed' FROM c
          WHERE q.queue = '{{ queue }}' AND q.id = c.id
          RETURNING q.id
      iterator: job
      spec:
        mode: cursor
        max_in_flight: 4
        frame: {max_rows: 40, row_concurrency: 8}
    tool:
      kind: postgres
      auth: pg_test
      command: |
        SELECT pg_sleep({{ pause }});
        INSERT INTO public.chaos_q_done SELECT '{{ queue }}', {{ iter.job.id }}
        WHERE 1 / {{ 0 if iter.job.id in bad else 1 }} = 1 ON CONFLICT DO NOTHING;
        UPDATE public.chaos_q_queue SET status = 'done'
        WHERE queue = '{{ queue }}' AND id = {{ iter.job.id }}
          AND 1 / {{ 0 if iter.job.id in bad else 1 }} = 1;
      spec:
        policy:
          rules:
            - when: "{{ output.status == 'error' }}"
              then: {do: quarantine}
"""


def test_worker_sigkill_during_a_cursor_quarantine_and_its_redrive(cluster_factory: Any) -> None:
    """A cursor's quarantined rows are redriven from the rows their commands recorded
    (nothing claims them again): workers killed in both executions, every row is still
    counted once across them and ends `done` in the queue."""
    cluster: Cluster = cluster_factory()
    engine = cluster.engine
    queue = f"q{cluster.test[-8:]}"
    eid = engine.start_text(POISONED_CURSOR, {"queue": queue, "n": ROWS, "bad": BAD_ROWS})
    kill_workers(cluster, eid, (250, 700))
    assert cluster.wait(eid) == "COMPLETED"
    first = engine.summary(eid)["steps"]["drain"]["stats"]
    assert first == {
        "total": ROWS,
        "success": ROWS - len(BAD_ROWS),
        "failed": 0,
        "quarantined": len(BAD_ROWS),
    }
    assert marks(cluster, eid, "item.quarantined") == len(BAD_ROWS)
    assert sorted(q["item"]["id"] for q in engine.quarantine(eid)["items"]) == BAD_ROWS
    claimed = cluster.query(
        "SELECT id FROM public.chaos_q_queue WHERE queue = %s AND status <> 'done' ORDER BY id",
        queue,
        data=True,
    )
    assert [i for (i,) in claimed] == BAD_ROWS  # left claimed: a cursor never takes them
    # fixed by the payload, slowed so that a worker dies while the redrive runs
    redrive = engine.redrive(eid, step="drain", overrides={"bad": [], "pause": 0.5})
    kill_workers(cluster, redrive, (4,))
    assert cluster.wait(redrive) == "COMPLETED"
    second = engine.summary(redrive)["steps"]["drain"]["stats"]
    assert second == {"total": len(BAD_ROWS), "success": len(BAD_ROWS), "failed": 0}
    assert first["success"] + second["success"] == ROWS  # every row counted once
    assert marks(cluster, eid, "item.redriven") == len(BAD_ROWS)
    assert {q["redriven_by"] for q in engine.quarantine(eid)["items"]} == {redrive}
    claims = cluster.query(
        "SELECT count(*) FROM commands WHERE execution_id = %s AND kind = 'claim'", redrive
    )
    assert claims == [(0,)]
    done = cluster.query(
        "SELECT count(*), count(*) FILTER (WHERE q.status = 'done') FROM public.chaos_q_done d "
        "JOIN public.chaos_q_queue q USING (queue, id) WHERE queue = %s",
        queue,
        data=True,
    )
    assert done == [(ROWS, ROWS)]
