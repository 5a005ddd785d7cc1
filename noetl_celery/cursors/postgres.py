"""The `postgres` cursor driver: the claim statement runs in autocommit on the pooled
connection of its credential (the same pools the postgres tool uses)."""

from __future__ import annotations

from typing import Any, ClassVar

import psycopg

from noetl_celery.cursors.base import ClaimRequest, CursorError
from noetl_celery.errors import ConfigurationError, CredentialError
from noetl_celery.tools.jsonable import to_jsonable
from noetl_celery.tools.pg_session import PoolExhausted, pg_connection
from noetl_celery.tools.postgres_tool import auth_alias, db_message, sqlstate_kind
from noetl_celery.tools.services import ToolServices


class Driver:
    kind: ClassVar[str] = "postgres"

    def claim(self, request: ClaimRequest, services: ToolServices) -> list[dict[str, Any]]:
        redact = services.redactor.redact
        alias = auth_alias({"auth": request.auth})
        if alias is None:
            raise CursorError("config_error", "a postgres cursor needs `auth` (a credential)")
        try:
            conninfo = services.credentials.resolve(alias).postgres_conninfo()
        except (CredentialError, ConfigurationError) as exc:
            raise CursorError("config_error", redact(str(exc))) from None
        try:
            with pg_connection(services.pg_pool(conninfo), conninfo) as conn:
                cur = conn.execute(request.sql)
                if cur.description is None:
                    return []
                columns = [column.name for column in cur.description]
                return [
                    {
                        name: to_jsonable(value, bytes_as="hex")
                        for name, value in zip(columns, row, strict=True)
                    }
                    for row in cur.fetchall()
                ]
        except PoolExhausted as exc:
            raise CursorError("db_connection", str(exc), retryable=True) from None
        except psycopg.Error as exc:
            kind, retryable = sqlstate_kind(exc.sqlstate)
            if isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None:
                kind, retryable = "db_connection", True
            raise CursorError(kind, redact(db_message(exc)), retryable) from None
