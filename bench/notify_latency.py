"""Notifications: how long after a run fails its webhook is called, and what the idle
deliverer's poll costs.

    python -m bench.notify_latency [--runs 20] [--database-url postgresql+psycopg://...]
    python -m bench.notify_latency --outage 30 [--database-url ...]

An embedded engine (SQLite under a temporary home unless --database-url names a
migrated Postgres) runs `--runs` failing playbooks, one after the other; a local
receiver (tests.support.notify_receiver) timestamps each POST. Printed: the delay from
the execution's `finished_at` to the POST's arrival (median, p90, max; the deliverer
looks once a second, so about half a second is expected), then the wall time of one
idle poll (`notifications.any_due`, the query every deliverer runs each second while
nothing is due), median of 2,000.

With `--outage SECONDS` it measures a receiver that is down instead: one run fails while
nothing listens on the receiver's port, the receiver comes back after SECONDS, and the
default backoff (NOETL_NOTIFY_BACKOFF_SECONDS 5, doubled per failure) is left as it is.
Printed: the attempts made while it was down, the wait from its return to the POST, and
the ids it accepted (one id, once, is what at-least-once delivery with an id promises).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.settings_notify import NotifySettings
from noetl_celery.store.database import SchemaMode
from tests.support.notify_receiver import Delivery, receiving

FAILING = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: f, path: bench/notify_fails}
workflow:
  - step: boom
    tool: {kind: python, code: "raise RuntimeError('bench')"}
"""


def more_than(count: int, deliveries: list[Delivery]) -> bool:
    return len(deliveries) > count


def outage(seconds: float, database_url: str) -> None:
    with tempfile.TemporaryDirectory() as home, receiving() as receiver:
        receiver.down()  # its port is known; nothing listens there until it comes back
        settings = Settings(
            home=Path(home), database_url=database_url, notify=NotifySettings(url=receiver.url())
        )
        engine = Engine(settings, schema=SchemaMode.MIGRATE)
        engine.use_in_process_workers()
        try:
            eid = engine.start_text(FAILING)
            engine.wait(eid, 60)
            went_down = time.monotonic()
            time.sleep(seconds)
            (row,) = engine.detail(eid)["notifications"]
            tried, error = row["attempts"], row["last_error"]
            assert row["delivered_at"] is None, "delivered while the receiver was down"
            receiver.up()
            back = time.monotonic()
            got = receiver.wait_for(partial(more_than, 0), timeout=15 * 60)
            delivered = time.monotonic()
            time.sleep(3)  # a second POST of the same row would come now, if any
            ids = [d.json["id"] for d in receiver.accepted()]
            print(
                f"receiver down {back - went_down:.1f}s after the run failed: {tried} attempts "
                f"failed ({error}); back up -> POST after {delivered - back:.1f}s; "
                f"accepted {len(ids)} POST(s), ids {sorted(set(ids))} "
                f"(expected one: {eid}.failed.engine); first body status {got[0].json['status']}"
            )
        finally:
            engine.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--database-url", default="")
    parser.add_argument("--outage", type=float, default=0.0)
    args = parser.parse_args()
    if args.outage:
        outage(args.outage, args.database_url)
        return
    with tempfile.TemporaryDirectory() as home, receiving() as receiver:
        settings = Settings(
            home=Path(home),
            database_url=args.database_url,
            notify=NotifySettings(url=receiver.url()),
        )
        engine = Engine(settings, schema=SchemaMode.MIGRATE)
        engine.use_in_process_workers()
        try:
            delays = []
            for _ in range(args.runs):
                eid = engine.start_text(FAILING)
                engine.wait(eid, 60)
                seen = len(receiver.accepted())
                receiver.wait_for(partial(more_than, seen), timeout=60)
                arrived = dt.datetime.now(dt.UTC).replace(tzinfo=None)
                finished = engine.store.execution(eid).finished_at
                assert finished is not None
                # the POST arrived between `seen` growing and now: an upper bound
                delays.append((arrived - finished).total_seconds())
            delays.sort()
            backend = "postgres" if args.database_url else "sqlite"
            print(
                f"finish -> POST ({args.runs} runs, {backend}): "
                f"median {statistics.median(delays):.3f}s  "
                f"p90 {delays[int(0.9 * (len(delays) - 1))]:.3f}s  max {delays[-1]:.3f}s"
            )
            polls = []
            for _ in range(2000):
                start = time.perf_counter()
                engine.store.notifications.any_due(["engine", "playbook"])
                polls.append(time.perf_counter() - start)
            print(f"idle poll: median {statistics.median(polls) * 1e6:.0f} us")
        finally:
            engine.close()


if __name__ == "__main__":
    main()
