"""Which process runs an embedded execution, and ending those whose process is gone.

Embedded executions run on the threads of the process that started them (`run`, a
Python `Client` without a broker): when that process dies (SIGKILL, a crash, a closed
terminal) the execution can never progress, yet it would stay RUNNING for good. Each
records its owner as `host:pid:boot.start`: the boot id and the process start time (in
clock ticks since boot, from /proc) tell a reused pid apart. The next embedded start on
the same host ends every RUNNING execution whose owner is gone: FAILED with an error
naming the process, its children CANCELLED (termination.end_tree). Owners on other
hosts are left alone: their liveness cannot be seen from here.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

from noetl_celery import logcapture
from noetl_celery.constants import FAILED
from noetl_celery.passes.dispatch import Dispatcher
from noetl_celery.passes.logsink import LogSink
from noetl_celery.passes.termination import end_tree
from noetl_celery.store.repository import Store

log = logging.getLogger("noetl_celery.owner")

_UNKNOWN = "?"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8] or _UNKNOWN
    except OSError:
        return _UNKNOWN


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in ticks since boot) of a process, None when there is none
    (or no /proc to read it from)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # the command name may hold spaces
    return (fields[0], fields[19]) if len(fields) > 19 else None


def identity(pid: int | None = None) -> str:
    """`host:pid:boot.start` of this process (or of `pid` on this host)."""
    pid = os.getpid() if pid is None else pid
    stat = _stat(pid)
    start = stat[1] if stat else _UNKNOWN
    return f"{socket.gethostname()}:{pid}:{_boot_id()}.{start}"


def is_gone(owner: str) -> bool | None:
    """True when the owner process no longer exists (or its pid now belongs to another
    process), False while it runs, None for an owner on another host."""
    host, _, rest = owner.partition(":")
    pid_text, _, stamp = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return None
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # someone else's process: it exists
    stat = _stat(pid)
    if stat is None:
        return False  # no /proc: the pid exists, which is all that can be told
    state, start = stat
    if state in ("Z", "X"):
        return True  # dead, not yet reaped by its parent
    boot, _, ticks = stamp.partition(".")
    if _UNKNOWN in (boot, ticks):
        return False
    return f"{boot}.{ticks}" != f"{_boot_id()}.{start}"


def end_orphans(store: Store, dispatcher: Dispatcher, logs: LogSink | None = None) -> list[str]:
    """End every RUNNING embedded execution on this host whose owner process is gone;
    returns their ids."""
    ended = []
    collector = logs.collector() if logs is not None else None
    with logcapture.capturing(collector):
        for execution_id, owner in store.owners.running_owned():
            if not is_gone(owner):
                continue
            message = (
                f"the process that ran this embedded execution ({owner}) is gone: it exited "
                "or was killed while the execution was RUNNING, and its commands ran on "
                "that process's threads; ended by the next embedded start"
            )
            if end_tree(store, dispatcher, execution_id, FAILED, message):
                log.warning(
                    "execution %s FAILED: %s",
                    execution_id,
                    message,
                    extra={"execution_id": execution_id},
                )
                ended.append(execution_id)
    store.history.write_logs(LogSink.collected_rows(collector))
    return ended
