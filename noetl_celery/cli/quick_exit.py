"""Ending a short command's process without the interpreter's teardown (issue 15).

Once a command such as `run` has printed its answer and closed its engine, all that
is left is the interpreter's finalization: clearing the dicts of the ~600 modules an
embedded run imports and freeing every object they hold. It does nothing the user can
see and cost 8-12% of the CPU of an embedded hello_world run (`perf stat -r 30 -e
task-clock` of `run hello_world.yaml --json`: 614 -> 563 ms and 620 -> 540 ms). `end_now`
does what finalization does that matters (the `atexit` handlers: logging's flush and
close among them; the standard streams flushed) and then ends the process with
`os._exit`.

Everything the interpreter does at exit before finalization is done as it does it:
threading's shutdown first (it waits for the threads that are not daemons, and runs
the hooks `concurrent.futures` joins its workers with), then the `atexit` handlers.
A standard stream that cannot be flushed (a closed pipe) takes the ordinary exit,
which reports it.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

# what `sys.exit` and `SystemExit.code` take
ExitCode = str | int | None


def exit_status(code: ExitCode) -> int:
    """The process exit status `sys.exit(code)` gives: None is 0, an int is itself,
    anything else is printed to stderr and gives 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _flush() -> bool:
    for stream in (sys.stdout, sys.stderr):
        if stream is None:
            continue
        try:
            stream.flush()
        except (OSError, ValueError):
            return False
    return True


def end_now(code: ExitCode) -> NoReturn:
    """End the process with `code` (as `sys.exit` takes it), skipping finalization."""
    # the interpreter's own first steps at exit; both are private to CPython, so an
    # interpreter without them gets the ordinary exit
    shutdown = getattr(threading, "_shutdown", None)
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if shutdown is None or run_exitfuncs is None or not _flush():
        sys.exit(code)
    status = exit_status(code)
    shutdown()  # waits for threads that are not daemons (idempotent: exit calls it too)
    run_exitfuncs()  # logging.shutdown and whatever a library registered
    _flush()
    os._exit(status)
