"""What Flower is given: readable task arguments made of ids only, and basic auth that
Flower cannot misread."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from noetl_celery.cli.main import cli
from noetl_celery.constants import TASK_EXECUTE_COMMAND, TASK_EXECUTE_COMMANDS, TASK_ORCHESTRATE
from noetl_celery.orchestrator.ids import (
    claim_command_id,
    iteration_command_id,
    step_command_id,
)
from noetl_celery.tasks.dispatcher import readable


@pytest.mark.parametrize(
    ("command_id", "shown"),
    [
        (step_command_id("e1", "start", 1), "execution=e1 step=start command=e1:start:1"),
        (
            iteration_command_id("e1", "each", 2, 7, attempt=3),
            "execution=e1 step=each command=e1:each:2:7:a3",
        ),
        (
            claim_command_id("e1", "drain", 1, 0, 4),
            "execution=e1 step=drain command=e1:drain:1:c0.4",
        ),
    ],
)
def test_a_command_is_shown_by_its_coordinate(command_id: str, shown: str) -> None:
    assert readable(TASK_EXECUTE_COMMAND, command_id) == shown


def test_an_orchestration_pass_is_shown_by_its_execution() -> None:
    assert readable(TASK_ORCHESTRATE, "e1") == "execution=e1"


@pytest.mark.parametrize("auth", ["admin", "admin:", ":pw", "admin:pa,ss", "a:b,"])
def test_flower_refuses_basic_auth_it_would_misread(auth: str) -> None:
    # "admin:pa,ss" would be read by Flower as two entries, the second ("ss") a valid
    # login on its own
    result = CliRunner().invoke(
        cli,
        ["flower", "--basic-auth", auth],
        env={"NOETL_BROKER_URL": "redis://127.0.0.1:1/0", "NOETL_FLOWER_BASIC_AUTH": None},
    )
    assert result.exit_code == 2 and "USER:PASS" in result.output


def test_flower_reads_basic_auth_from_the_environment_too() -> None:
    result = CliRunner().invoke(
        cli,
        ["flower"],
        env={"NOETL_BROKER_URL": "redis://127.0.0.1:1/0", "NOETL_FLOWER_BASIC_AUTH": "admin"},
    )
    assert result.exit_code == 2 and "NOETL_FLOWER_BASIC_AUTH" in result.output


def test_metrics_route_needs_the_login_and_nothing_else_changes() -> None:
    from flower import urls
    from flower.views.monitor import Healthcheck, Metrics

    from noetl_celery.tasks.flower_metrics import LoggedInMetrics, protect_metrics

    routes = list(urls.handlers)
    before = [r for r in routes if not (isinstance(r, tuple) and r[0] == "/metrics")]
    assert ("/metrics", Metrics) in routes or ("/metrics", LoggedInMetrics) in routes
    protect_metrics(routes)
    protect_metrics(routes)  # twice: still one route, still protected
    assert [r for r in routes if isinstance(r, tuple) and r[0] == "/metrics"] == [
        ("/metrics", LoggedInMetrics)
    ]
    assert [r for r in routes if not (isinstance(r, tuple) and r[0] == "/metrics")] == before
    assert ("/healthcheck", Healthcheck) in routes  # liveness probes stay open
    assert issubclass(LoggedInMetrics, Metrics)


def test_a_batch_is_shown_by_its_coordinate_size_and_first_command() -> None:
    ids = [iteration_command_id("e1", "each", 1, n) for n in range(3)]
    shown = "execution=e1 step=each commands=3 first=e1:each:1:0"
    assert readable(TASK_EXECUTE_COMMANDS, ids) == shown


def test_a_batch_spanning_executions_names_them() -> None:
    ids = [iteration_command_id(e, "each", 1, 0) for e in ("e1", "e2")]
    shown = "executions=e1,e2 step=each commands=2 first=e1:each:1:0"
    assert readable(TASK_EXECUTE_COMMANDS, ids) == shown
