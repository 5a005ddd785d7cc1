"""A worker SIGKILLed while its command holds a keyed `rate_limit.concurrency` slot of a
one-slot key: the slot is its command's only while that command's lease lives, so the
key's other commands (and the killed run's next attempt, a command of another id) run
once the lease lapses; a slot bound to its holder alone would block the key forever."""

from __future__ import annotations

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
