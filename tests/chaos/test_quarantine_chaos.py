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
