"""The worker's graceful stop: Celery's warm shutdown, bounded (worker.shutdown).

On SIGTERM Celery stops taking messages and waits for the tasks that run. This adds the
bound: `NOETL_WORKER_SHUTDOWN_SECONDS` after the signal, if the worker is still there,
its pool processes are killed, what they (or the main process's threads) were running is
handed back for other workers, and the process exits. Kubernetes gives a pod 30 s
between SIGTERM and SIGKILL: keep the setting below that. Celery's own soft shutdown is
not used: it sleeps its whole timeout even when every task has ended, and cancels tasks
without releasing their claims (another worker would wait out their leases).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time

from celery.signals import worker_shutting_down

from noetl_celery.tasks.app import settings
from noetl_celery.worker.shutdown import hand_back

log = logging.getLogger("noetl_celery.worker")

_started = threading.Event()


def pool_pids() -> list[int]:
    """The pids of this process's children (a prefork pool's processes)."""
    try:
        from billiard.process import active_children  # type: ignore[import-untyped]

        pids = [p.pid for p in active_children() if p.pid]
    except Exception:  # billiard's bookkeeping unavailable: read /proc
        pids = []
    if pids:
        return pids
    me = os.getpid()
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{me}/task"):
            with open(f"/proc/{me}/task/{task}/children") as fh:
                found.extend(int(p) for p in fh.read().split())
    except OSError:
        pass
    return found


def stop_after_budget(budget: float) -> None:
    """Wait `budget` seconds; then kill the pool, hand back what ran, exit."""
    time.sleep(budget)
    children = pool_pids()
    for pid in children:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    host = socket.gethostname()
    workers = [f"{host}:{pid}" for pid in (os.getpid(), *children)]
    count = 0
    try:
        from noetl_celery.tasks.runtime import engine

        eng = engine()
        count = hand_back(
            workers,
            eng.store.release_workers,
            eng.orchestrator.dispatcher.publish,
            settings.batch_size,
        )
    except Exception:  # the database away: the leases bring the commands back
        log.warning(
            "shutdown: could not hand back running commands; they come back when their "
            "leases expire (NOETL_LEASE_SECONDS)",
            exc_info=True,
        )
    log.warning(
        "shutdown: still running after NOETL_WORKER_SHUTDOWN_SECONDS=%g: %d command(s) "
        "handed back to other workers; exiting",
        budget,
        count,
    )
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


@worker_shutting_down.connect
def _bound_the_shutdown(**_: object) -> None:
    if _started.is_set():
        return
    _started.set()
    threading.Thread(
        target=stop_after_budget,
        args=(settings.worker_shutdown_seconds,),
        name="noetl-shutdown",
        daemon=True,
    ).start()
