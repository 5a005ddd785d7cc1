"""Count the SQL statements and round trips of the processes a bench starts.

`traced(path)` puts a `sitecustomize` on the PYTHONPATH of the processes started inside it
(a worker and its prefork children): every psycopg `execute`/`executemany`, `commit` and
`rollback` of those processes appends one line `pid<TAB>kind<TAB>statement` to `path`.
Each of those calls is one round trip to the server (psycopg 3 sends a statement's
parse/bind/execute in one go). `summary` groups the lines by statement shape.
"""

from __future__ import annotations

import collections
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ENV = "NOETL_BENCH_SQL_TRACE"
_SITE = """import os
if os.environ.get("NOETL_BENCH_SQL_TRACE"):
    import bench.sqltrace
    bench.sqltrace.install(os.environ["NOETL_BENCH_SQL_TRACE"])
"""


def install(path: str) -> None:
    import psycopg

    out = open(path, "a", buffering=1)  # noqa: SIM115 (lives as long as the process)

    def log(kind: str, query: Any) -> None:
        text = query if isinstance(query, str | bytes) else repr(query)
        if isinstance(text, bytes):
            text = text.decode(errors="replace")
        out.write(f"{os.getpid()}\t{kind}\t{' '.join(str(text).split())[:300]}\n")

    def wrap(cls: Any, name: str, kind: str) -> None:
        original = getattr(cls, name)

        def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
            # commit and rollback outside a transaction send nothing (psycopg skips them)
            idle = kind in ("commit", "rollback") and self.pgconn.transaction_status == 0
            # a statement in a pipeline is no round trip of its own: the pipeline's sync is
            piped = kind == "execute" and getattr(self, "_conn", self)._pipeline is not None
            if not idle:
                if kind == "execute" and not piped and _opens_transaction(self._conn):
                    log("begin", "BEGIN (implicit)")
                log("pipelined" if piped else kind, args[0] if args else name.upper())
            return original(self, *args, **kwargs)

        setattr(cls, name, traced)

    def wrap_async(cls: Any, name: str, kind: str) -> None:
        original = getattr(cls, name)

        async def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
            idle = kind in ("commit", "rollback") and self.pgconn.transaction_status == 0
            if not idle:
                if kind == "execute" and _opens_transaction(self._conn):
                    log("begin", "BEGIN (implicit)")
                log(kind, args[0] if args else name.upper())
            return await original(self, *args, **kwargs)

        setattr(cls, name, traced)

    # procrastinate's worker (bench.procrastinate_frames) is asyncio
    wrap_async(psycopg.AsyncCursor, "execute", "execute")
    wrap_async(psycopg.AsyncConnection, "commit", "commit")
    wrap_async(psycopg.AsyncConnection, "rollback", "rollback")
    wrap(psycopg.Cursor, "execute", "execute")
    wrap(psycopg.Cursor, "executemany", "executemany")
    wrap(psycopg.Connection, "commit", "commit")
    wrap(psycopg.Connection, "rollback", "rollback")
    wrap(psycopg.Pipeline, "__exit__", "sync")


def _opens_transaction(conn: Any) -> bool:
    """psycopg sends a BEGIN of its own (one round trip) before the first statement of a
    transaction on a connection that is not in autocommit."""
    return not conn.autocommit and conn.pgconn.transaction_status == 0 and conn._pipeline is None


@contextmanager
def traced(path: Path) -> Iterator[None]:
    """Processes started inside write their statements to `path`."""
    site = Path(tempfile.mkdtemp(prefix="sqltrace-"))
    (site / "sitecustomize.py").write_text(_SITE)
    saved = {k: os.environ.get(k) for k in (ENV, "PYTHONPATH")}
    os.environ[ENV] = str(path)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), saved["PYTHONPATH"]) if p)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_NUMBERS = re.compile(r"\b\d+\b|'[^']*'")


def shape(statement: str) -> str:
    """A statement with its literals replaced, so repeats group together."""
    return _NUMBERS.sub("?", statement)[:160]


def round_trips(counts: collections.Counter[tuple[str, str]]) -> int:
    return sum(n for (kind, _), n in counts.items() if kind != "pipelined")


def summary(path: Path) -> collections.Counter[tuple[str, str]]:
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in path.read_text(errors="replace").splitlines():
        _, kind, statement = [*line.split("\t", 2), "", ""][:3]
        counts[(kind, shape(statement))] += 1
    return counts
