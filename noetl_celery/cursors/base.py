"""The contract of cursor drivers (`loop.cursor.kind`).

A driver runs one rendered claim statement in a transaction of its own and returns the
rows it claimed, *holding that transaction open*: the engine commits it only after it has
recorded the rows in its own database (the claim command's terminal event). A worker
that dies before that record rolls the claim back with its connection, so the rows are
still pending for the next claim; one that dies between the two commits leaves rows the
engine knows but the queue still shows pending, which are then run twice (at least once,
never lost). With autocommit the first case would lose the rows: marked claimed in the
queue, known to nobody. The driver must return *every* row the statement returned (the
claim SQL is expected to `LIMIT {{ __frame_max_rows }}` itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from noetl_celery.models.outcome import ErrorKind

if TYPE_CHECKING:
    from noetl_celery.tools.services import ToolServices


@dataclass(frozen=True)
class ClaimRequest:
    kind: str
    auth: Any  # a credential alias (postgres) or a database path (sqlite)
    sql: str  # rendered
    max_rows: int
    options: Mapping[str, Any] = field(default_factory=dict)


class CursorError(Exception):
    """A claim failed; `kind` and `retryable` follow the tools' error kinds."""

    def __init__(self, kind: ErrorKind, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable


class HeldClaim(Protocol):
    """Claimed rows whose transaction is still open: `commit` once the engine has
    recorded them, `rollback` when it could not (the rows go back to the queue).
    `witness`: that transaction's (backend pid, transaction id) on its server, when the
    server may be the engine's own (the engine then checks it: a queue transaction on its
    own server lets its record commit asynchronously, store.queries.frames); else None."""

    rows: list[dict[str, Any]]
    witness: tuple[int, int] | None

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


@dataclass
class Committed:
    """A claim whose transaction already ended (a driver that cannot hold one open)."""

    rows: list[dict[str, Any]]
    witness: tuple[int, int] | None = None

    def commit(self) -> None:
        return None

    def rollback(self) -> None:
        return None


class CursorDriver(Protocol):
    kind: ClassVar[str]

    def claim(self, request: ClaimRequest, services: ToolServices) -> HeldClaim: ...
