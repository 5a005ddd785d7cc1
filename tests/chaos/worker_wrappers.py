"""`noetl-celery` with a fault built in, for worker processes of the chaos suite:

    python -m tests.chaos.worker_wrappers duplicate worker -c 2
    python -m tests.chaos.worker_wrappers die-after-commit worker -c 2

- `duplicate`: every command message is published twice (at-least-once delivery at its
  worst); the conditional claim must drop every second copy.
- `die-after-commit`: a process SIGKILLs itself inside `publish`, i.e. after the commit
  of the transaction that inserted the commands and before their messages leave, up to
  NOETL_CHAOS_DEATHS times in all (marker files in NOETL_CHAOS_DIR), once it has
  published NOETL_CHAOS_AFTER messages.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from noetl_celery.tasks.dispatcher import CeleryDispatcher


def _duplicate() -> None:
    original = CeleryDispatcher.publish

    def publish(
        self: CeleryDispatcher, command_ids: Sequence[str], queue: str | None = None
    ) -> None:
        # two publishes: one publish sends an id once (orchestrator.packing drops a
        # repeat within it), so the second one is the duplicate delivery
        original(self, command_ids, queue)
        original(self, command_ids, queue)

    CeleryDispatcher.publish = publish  # type: ignore[method-assign]


def _die_after_commit() -> None:
    original = CeleryDispatcher.publish
    deaths = int(os.environ.get("NOETL_CHAOS_DEATHS", "3"))
    after = int(os.environ.get("NOETL_CHAOS_AFTER", "200"))
    markers = Path(os.environ["NOETL_CHAOS_DIR"])
    sent = 0

    def publish(
        self: CeleryDispatcher, command_ids: Sequence[str], queue: str | None = None
    ) -> None:
        nonlocal sent
        sent += len(command_ids)
        if sent >= after:
            for n in range(deaths):
                try:
                    fd = os.open(markers / f"death-{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    continue
                record = {"pid": os.getpid(), "at": time.time(), "commands": list(command_ids)}
                os.write(fd, json.dumps(record).encode())
                os.close(fd)
                os.kill(os.getpid(), signal.SIGKILL)  # committed, not published
        original(self, command_ids, queue)

    CeleryDispatcher.publish = publish  # type: ignore[method-assign]


FAULTS = {"duplicate": _duplicate, "die-after-commit": _die_after_commit}


def main() -> None:
    fault, *argv = sys.argv[1:]
    FAULTS[fault]()
    sys.argv = ["noetl-celery", *argv]
    from noetl_celery.cli.main import main as cli

    cli()


if __name__ == "__main__":
    main()
