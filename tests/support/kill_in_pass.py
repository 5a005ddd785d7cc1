"""Run one orchestration pass of EXECUTION_ID on DATABASE_URL and stop right after its
writes, before the commit, holding the lock: the caller SIGKILLs this process there."""

from __future__ import annotations

import sys
import time

from noetl_celery.engine.service import Engine
from noetl_celery.passes import orchestrate
from noetl_celery.settings import Settings
from noetl_celery.store import queries
from noetl_celery.store.database import SchemaMode
from noetl_celery.store.orchestration import OrchestrationTx
from noetl_celery.store.schema import events, utcnow


def main() -> None:
    execution_id, url = sys.argv[1], sys.argv[2]
    engine = Engine(Settings(database_url=url), schema=SchemaMode.MIGRATE)
    # fold now: we want a real pass (patched where the orchestrator looks it up)
    orchestrate.may_defer_all = lambda *args: False  # type: ignore[attr-defined]
    # Take the execution's lock first and hold it: workers keep closing their commands
    # but cannot fold them in place (batches close many at once, and a worker that got
    # the lock first would leave this pass nothing to fold), so the completions wait in
    # the inbox for this pass, which then refills the window: it issues commands.
    # The lock as Store.orchestration takes it, but without the inbox its statement reads
    # (this pass reads it after waiting, as a pass reads it the moment it has the lock).
    store = engine.store
    with store.db.write() as conn:
        row = queries.lock_execution(conn, execution_id, wait=True)
        assert row is not None
        tx = OrchestrationTx(conn, row, store.result_cache, notify=store.notifications)
        deadline = time.monotonic() + 5  # well inside the idle-in-transaction timeout
        while not engine.store.has_unhandled(execution_id):
            if time.monotonic() > deadline:
                print("NOTHING TO FOLD", flush=True)  # the test fails on this line
                return
            time.sleep(0.01)
        time.sleep(0.2)  # a few more completions
        result = engine.orchestrator.run_pass(tx)
        # a marker in the same transaction: absent after the kill <=> nothing committed
        tx.conn.execute(
            events.insert().values(
                execution_id=execution_id,
                type="test.killed_pass_marker",
                created_at=utcnow(),
            )
        )
        print(f"APPLIED {len(result.publish)}", flush=True)
        time.sleep(300)  # killed here, before the commit


if __name__ == "__main__":
    main()
