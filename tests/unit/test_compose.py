"""docker-compose.yml starts what the README documents, with the engine's own commands
(`docker compose` is not installed here, so the file is checked as data)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from noetl_celery.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]


def services() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data["services"]  # type: ignore[no-any-return]


def test_every_engine_service_runs_a_noetl_celery_command() -> None:
    entrypoint = next(
        line
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("ENTRYPOINT")
    )
    assert '"noetl-celery"' in entrypoint
    svc = services()
    assert {"postgres", "redis", "migrate", "worker", "beat", "flower"} <= set(svc)
    commands = {name: svc[name]["command"] for name in ("migrate", "worker", "beat", "flower")}
    assert commands["migrate"][:2] == ["db", "upgrade"]
    for name, command in commands.items():
        assert "entrypoint" not in svc[name], name  # the image's noetl-celery, not celery
        assert command[0] in cli.commands, f"{name}: {command[0]} is no noetl-celery command"


def test_the_engine_services_share_database_and_broker() -> None:
    svc = services()
    for name in ("migrate", "worker", "beat", "flower"):
        env = svc[name]["environment"]
        assert env["NOETL_DATABASE_URL"].startswith("postgresql://")
        assert env["NOETL_BROKER_URL"].startswith("redis://redis:6379")


def test_flower_is_authenticated_and_published_on_loopback() -> None:
    flower = services()["flower"]
    assert "NOETL_FLOWER_BASIC_AUTH" in flower["environment"]
    assert "FLOWER_UNAUTHENTICATED_API" not in flower["environment"]
    assert all(port.startswith("127.0.0.1:") for port in flower["ports"])
