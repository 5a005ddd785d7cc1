"""docker-compose.yml starts what the README documents, with the engine's own commands
(`docker compose` is not installed here, so the file is checked as data and each
service's command is parsed by the real `noetl-celery` command line)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from noetl_celery.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
ENGINE_SERVICES = ("migrate", "worker", "beat", "flower", "api")


def services() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data["services"]


def parse(words: list[str]) -> tuple[str, dict[str, Any]]:
    """The `noetl-celery` command `words` name (`db upgrade`) and its parsed options;
    click raises on an unknown command or option."""
    command: click.Command = cli
    path: list[str] = []
    while isinstance(command, click.Group):
        # get_command: the top group imports its commands by name (cli.main.LazyGroup)
        found = command.get_command(click.Context(command), words[0]) if words else None
        assert found is not None, f"no command {[*path, *words[:1]]}"
        path.append(words[0])
        command, words = found, words[1:]
    return " ".join(path), command.make_context(path[-1], list(words)).params


def test_the_image_runs_noetl_celery() -> None:
    entrypoint = next(
        line
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("ENTRYPOINT")
    )
    assert entrypoint.split(None, 1)[1].strip() == '["noetl-celery"]'


def dockerfile_stages() -> list[tuple[str, list[str]]]:
    """(stage name, instructions) per `FROM`, continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    stages: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            words = line.split()
            name = words[3] if len(words) >= 4 and words[2].upper() == "AS" else ""
            stages.append((name, []))
        else:
            stages[-1][1].append(line)
    return stages


def test_the_image_installs_a_wheel_built_in_its_own_stage() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2, "a build stage and a runtime stage"
    (build_name, build), (_, final) = stages[0], stages[-1]
    assert build_name, "the build stage is named, for COPY --from"
    assert any(i.startswith("RUN ") and "pip wheel" in i for i in build)
    copied = [i for i in final if i.startswith(f"COPY --from={build_name} ")]
    assert copied, "the runtime stage takes the wheel from the build stage"
    installs = [i for i in final if i.startswith("RUN ") and "pip install" in i]
    assert installs and all(".whl" in i for i in installs)
    everything = " ".join(i for _, stage in stages for i in stage).split()
    assert "-e" not in everything and "--editable" not in everything
    # the package's source is not in the runtime image: only the wheel's installed copy
    assert not any(i.startswith("COPY") and "noetl_celery" in i for i in final)


def test_every_engine_service_runs_a_noetl_celery_command() -> None:
    svc = services()
    assert {"postgres", "redis", *ENGINE_SERVICES} <= set(svc)
    commands = {name: parse(svc[name]["command"])[0] for name in ENGINE_SERVICES}
    assert commands == {
        "migrate": "db upgrade",
        "worker": "worker",
        "beat": "beat",
        "flower": "flower",
        "api": "serve",
    }
    for name in ENGINE_SERVICES:
        assert "entrypoint" not in svc[name], name  # the image's noetl-celery, not celery


def test_the_engine_waits_for_its_services_and_tables() -> None:
    svc = services()
    assert set(svc["migrate"]["depends_on"]) == {"postgres", "redis"}
    for name in ("worker", "beat", "api"):
        assert svc[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    for name in ("postgres", "redis"):
        assert "healthcheck" in svc[name]


def test_long_running_services_restart_and_one_shots_do_not() -> None:
    svc = services()
    for name in ("postgres", "redis", "worker", "beat", "flower"):
        assert svc[name].get("restart") == "unless-stopped", name
    # `migrate` must complete once (the others wait for it); restarting it would loop,
    # and `cli` is run on demand
    for name in ("migrate", "cli"):
        assert svc[name].get("restart", "no") == "no", name


def test_the_engine_services_share_database_and_broker() -> None:
    svc = services()
    for name in ENGINE_SERVICES:
        env = svc[name]["environment"]
        assert env["NOETL_DATABASE_URL"] == "postgresql://noetl:noetl@postgres:5432/noetl", name
        assert env["NOETL_BROKER_URL"] == "redis://redis:6379/0", name
    postgres = svc["postgres"]["environment"]
    assert (postgres["POSTGRES_USER"], postgres["POSTGRES_DB"]) == ("noetl", "noetl")


def test_flower_listens_in_its_container_with_basic_auth_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NOETL_FLOWER_BASIC_AUTH", raising=False)  # the option's default
    flower = services()["flower"]
    _, options = parse(flower["command"])
    # all interfaces inside the container (else the published port reaches nothing),
    # published on the host's loopback only
    assert options["address"] == "0.0.0.0"
    assert flower["ports"] == [f"127.0.0.1:{options['port']}:{options['port']}"]
    # the password comes from the host's environment, never from the command line
    assert options["basic_auth"] is None
    assert flower["environment"]["NOETL_FLOWER_BASIC_AUTH"].startswith("${NOETL_FLOWER_BASIC_AUTH")
    assert "FLOWER_UNAUTHENTICATED_API" not in flower["environment"]


def test_the_api_listens_in_its_container_with_credentials_from_the_environment() -> None:
    from noetl_celery.settings import Settings
    from noetl_celery.web.auth import ApiAuth, is_loopback

    api = services()["api"]
    _, options = parse(api["command"])
    assert not is_loopback(options["host"])  # reachable through the published port
    assert api["ports"] == [f"127.0.0.1:{options['port']}:{options['port']}"]
    env = api["environment"]
    assert env["NOETL_API_TOKEN"].startswith("${NOETL_API_TOKEN")
    # with compose's defaults substituted, serve has credentials: it will bind 0.0.0.0
    defaults = {k: v.split(":-", 1)[1].rstrip("}") for k, v in env.items() if ":-" in v}
    assert ApiAuth.from_settings(Settings.from_env(defaults)).configured
