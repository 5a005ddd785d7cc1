"""Fixtures for the tools unit tests: real services, no network services needed."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.settings import Settings
from noetl_celery.tools.base import ToolCall, ToolOutcome
from noetl_celery.tools.credentials import CredentialStore
from noetl_celery.tools.registry import get_tool
from noetl_celery.tools.services import ToolServices

SECRET = "Unit-Secret-Pw-8842"

RunTool = Callable[..., ToolOutcome]


@pytest.fixture
def unit_secret() -> str:
    """A password held by the `services` credential store (`pg_local`)."""
    return SECRET


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", duckdb_dir=str(tmp_path / "duckdb"))


@pytest.fixture
def services(settings: Settings) -> Iterator[ToolServices]:
    store = CredentialStore(
        {
            "pg_local": {
                "db_host": "127.0.0.1",
                "db_port": "5432",
                "db_user": "demo",
                "db_password": SECRET,
                "db_name": "demo",
            },
            "api": {"type": "http", "data": {"api_token": "tok-Unit-Token-5521"}},
        }
    )
    svc = ToolServices(settings, store)
    yield svc
    svc.close()


@pytest.fixture
def run_tool(services: ToolServices) -> RunTool:
    """run_tool(kind, config, input=..., context=..., execution_id=..., step=...)."""

    def run(
        kind: str,
        config: Mapping[str, Any],
        *,
        input: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
        execution_id: str = "exec-1",
        step: str = "step_a",
        svc: ToolServices | None = None,
    ) -> ToolOutcome:
        call = ToolCall(
            kind=kind,
            config=dict(config),
            input=dict(input or {}),
            execution_id=execution_id,
            step=step,
            command_id="cmd-1",
            services=svc or services,
            context=dict(context or {}),
        )
        return get_tool(kind).run(call)

    return run
