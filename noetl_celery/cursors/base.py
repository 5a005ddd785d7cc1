"""The contract of cursor drivers (`loop.cursor.kind`).

A driver runs one rendered claim statement in its own short transaction (autocommit)
and returns the rows it claimed. It must return *every* row the statement returned: a
row the statement marked as claimed but the engine never saw would be lost (the claim
SQL is expected to `LIMIT {{ __frame_max_rows }}` itself).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from noetl_celery.tools.services import ToolServices


@dataclass(frozen=True)
class ClaimRequest:
    kind: str
    auth: Any  # a credential alias (postgres) or a database path (sqlite)
    sql: str  # rendered
    max_rows: int
    options: dict[str, Any] = field(default_factory=dict)


class CursorError(Exception):
    """A claim failed; `kind` and `retryable` follow the tools' error kinds."""

    def __init__(self, kind: str, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable


class CursorDriver(Protocol):
    kind: ClassVar[str]

    def claim(self, request: ClaimRequest, services: ToolServices) -> list[dict[str, Any]]: ...
