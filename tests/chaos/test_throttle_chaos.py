"""A worker SIGKILLed while its command holds a keyed `rate_limit.concurrency` slot of a
one-slot key: the slot is its command's only while that command's lease lives, so the
key's other commands (and the killed run's next attempt, a command of another id) run
once the lease lapses; a slot bound to its holder alone would block the key forever."""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

import pytest

from tests.chaos.conftest import Cluster

pytestmark = pytest.mark.chaos

ONE_AT_A_TIME = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: chaos_throttle, path: tests/chaos_throttle}
workload: {n: 6, pause: 1.5}
workflow:
  - step: each
    loop:
      in: "{{ range(n) | list }}"
      iterator: x
      spec: {mode: parallel, max_in_flight: 6}
    rate_limit: {key: chaos-one, concurrency: 1}
    tool:
      kind: python
      input: {x: "{{ iter.x }}", pause: "{{ pause }}"}
      code: |
        import time
        time.sleep(pause)
        result = x
"""


def _holder(cluster: Cluster) -> tuple[str, str] | None:
    rows = cluster.query(
        "SELECT s.command_id, c.worker FROM throttle_slots s JOIN commands c "
        "ON c.command_id = s.command_id WHERE s.key = 'key:chaos-one' AND c.status = 'running'"
    )
    return (str(rows[0][0]), str(rows[0][1])) if rows else None


def test_a_killed_holder_frees_its_slot_with_its_lease(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory()
    eid = cluster.engine.start_text(ONE_AT_A_TIME)
    deadline = time.monotonic() + 60
    while (held := _holder(cluster)) is None:
        assert time.monotonic() < deadline, "no command took the key's slot"
        time.sleep(0.05)
    pid = int(held[1].rsplit(":", 1)[1])
    # the holding process (a pool child) is in its worker's process group
    victim = next(w for w in cluster.workers if os.getpgid(pid) == w.proc.pid)
    victim.kill()  # SIGKILL while its command holds the one slot
    victim.restart()
    assert cluster.wait(eid, 180) == "COMPLETED"
    stats = cluster.engine.summary(eid)["steps"]["each"]["stats"]
    assert stats["success"] == 6 and stats["failed"] == 0, stats
    # the killed run was replaced by a next attempt, a command of another id: the killed
    # one's slot row was freed by its lapsed lease, not taken back by the same command
    again = cluster.query("SELECT count(*) FROM commands WHERE command_id = %s", held[0] + ":a2")
    assert again[0][0] == 1
    # and every slot was given back at the end (the dead run's row taken over, released)
    assert cluster.query("SELECT count(*) FROM throttle_slots")[0][0] == 0


MIXED = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: chaos_throttle_mixed, path: tests/chaos_throttle_mixed}
workload: {items: []}
workflow:
  - step: each
    loop:
      in: "{{ items }}"
      iterator: x
      spec: {mode: parallel, max_in_flight: 4}
    rate_limit: {key: "chaos-mixed-{{ iter.x.k }}", per_second: "{{ iter.x.rate }}"}
    tool:
      kind: python
      input: {n: "{{ iter.x.n }}"}
      code: |
        import time
        time.sleep(0.2)
        result = n
"""


def test_items_parked_for_their_turn_are_counted_once_through_kills_and_a_flush(
    cluster_factory: Any,
) -> None:
    """A loop mixing a slow key (1/s) and a fast one: the slow key's items park for
    their turns and give their window slots back (`item.throttled`). A worker is
    SIGKILLed while items are parked that way (the parked rows are then issued by the
    reaper's sweep, not the dead process's timer) and again while bodies run, and the
    broker is flushed: every item completes exactly once, the loop counts each once,
    one loop.done, nothing left running."""
    cluster: Cluster = cluster_factory()
    slow = [{"k": "s", "n": n, "rate": 1} for n in range(12)]
    fast = [{"k": "f", "n": 100 + n, "rate": 20} for n in range(24)]
    items = [i for pair in itertools.zip_longest(slow, fast) for i in pair if i is not None]
    eid = cluster.engine.start_text(MIXED, {"items": items})

    def throttled() -> int:
        return int(
            cluster.query(
                "SELECT count(*) FROM events WHERE execution_id = %s AND type = 'item.throttled'",
                eid,
            )[0][0]
        )

    deadline = time.monotonic() + 90
    while throttled() < 3:
        assert time.monotonic() < deadline, "no item parked for its turn"
        time.sleep(0.05)
    first = cluster.workers[0]
    first.kill()  # SIGKILL while items are parked (some by it) and given back
    first.restart()
    cluster.redis.client().flushall()  # the broker loses every message in it
    while throttled() < 6:
        assert time.monotonic() < deadline, "no more items parked"
        time.sleep(0.05)
    second = cluster.workers[1]
    second.kill()
    second.restart()
    assert cluster.wait(eid, 240) == "COMPLETED", cluster.query(
        "SELECT error FROM executions WHERE execution_id = %s", eid
    )
    assert cluster.stats(eid, "each") == {"total": 36, "success": 36, "failed": 0}
    assert cluster.loop_dones(eid) == [("each", 1)]
    assert cluster.left_running(eid) == 0
    done = cluster.query(
        "SELECT iteration, count(*) FROM events WHERE execution_id = %s "
        "AND type = 'command.completed' GROUP BY iteration",
        eid,
    )
    assert sorted(i for i, _ in done) == list(range(36))
    assert {n for _, n in done} == {1}  # one terminal event per item
