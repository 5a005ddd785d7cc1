"""A stopping worker's hand-back (graceful restarts).

Told to stop (SIGTERM: a rolling restart, Kubernetes scaling down), a worker takes no new
message and lets what runs finish (Celery's warm shutdown). Whatever still runs after
`NOETL_WORKER_SHUTDOWN_SECONDS` is handed back: the processes running it are killed
first (nothing of theirs can close a command after this), then every command still
`running` under one of them is put back to `issued` in Postgres and published again, so
another worker takes it at once instead of after the lease (`NOETL_LEASE_SECONDS`) and
the reaper. The worker then exits. A command handed back runs again from its start (at
least once, as after any lost worker); it is never counted twice: a command closes once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from noetl_celery.orchestrator.packing import pack

log = logging.getLogger("noetl_celery.worker")

# release(workers) -> ids; publish(ids)
Release = Callable[[Sequence[str]], list[str]]
Publish = Callable[[Sequence[str]], None]


def hand_back(workers: Sequence[str], release: Release, publish: Publish, per_message: int) -> int:
    """Release every command running under `workers` (their processes gone) and publish
    them again; how many. A failed publish is the reaper's: the rows say `issued`."""
    released = release(workers)
    if not released:
        return 0
    try:
        for ids in pack(released, per_message):
            publish(ids)
    except Exception:
        log.warning(
            "shutdown: publishing %d handed-back commands failed; the reaper publishes them "
            "again (NOETL_ISSUED_GRACE_SECONDS)",
            len(released),
            exc_info=True,
        )
    return len(released)
