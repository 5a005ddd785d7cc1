"""The bundled examples as the tutorial (docs/tutorial.md) tells users to run them:
`noetl-celery example-api` serving the local API, `api_to_postgres.yaml` with the sample
credentials file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.support.example_api import ExampleApi
from tests.support.workers import run_cli

pytestmark = pytest.mark.acceptance
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "playbooks" / "examples"
# what the tutorial's "Run it, embedded" says to type (checked below, so neither drifts)
TUTORIAL_COMMANDS = (
    "noetl-celery example-api &",
    "export NOETL_CREDENTIALS_FILE=playbooks/examples/credentials.example.json",
    "noetl-celery run playbooks/examples/api_to_postgres.yaml",
    # "When it fails"
    "noetl-celery run playbooks/examples/api_to_postgres.yaml --set page_size=101 --json",
    "noetl-celery rerun ID --failed-items --set page_size=10",
)


def orders_by_shop(data_db: str) -> dict[str, tuple[int, int]]:
    """shop -> (rows, distinct executions that last wrote them)"""
    with psycopg.connect(data_db) as conn:
        rows = conn.execute(
            "SELECT shop, count(*), count(DISTINCT loaded_by) FROM example_orders GROUP BY shop"
        ).fetchall()
    return {shop: (n, writers) for shop, n, writers in rows}


def test_api_to_postgres_runs_here_without_internet(
    example_api: ExampleApi,
    embedded_env: dict[str, str],
    sample_credentials: Path,
    data_db: str,
) -> None:
    with psycopg.connect(data_db, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS example_orders")
    env = {**embedded_env, "NOETL_CREDENTIALS_FILE": str(sample_credentials)}
    playbook = str(EXAMPLES / "api_to_postgres.yaml")

    def run() -> dict[str, Any]:
        proc = run_cli(["run", playbook, "--set", f"api_url={example_api.url}", "--json"], env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out: dict[str, Any] = json.loads(proc.stdout)
        return out

    first = run()
    assert first["status"] == "COMPLETED"
    assert first["result"]["rows"] == [{"orders": 50, "shops": 3, "amount": 2662.72}]
    assert first["steps"]["load_shop"]["stats"] == {"total": 3, "success": 3, "failed": 0}
    assert orders_by_shop(data_db) == {"amsterdam": (23, 1), "berlin": (12, 1), "lisbon": (15, 1)}
    # every shop's page 2 answered 503 once and was asked again: 7 pages, 3 retries
    assert example_api.stats() == {"requests": 1 + 7 + 3, "unavailable": 3}

    second = run()  # upserts: the same 50 rows, now all written by the second run
    assert second["status"] == "COMPLETED" and second["result"]["rows"][0]["orders"] == 50
    assert orders_by_shop(data_db) == {"amsterdam": (23, 1), "berlin": (12, 1), "lisbon": (15, 1)}
    with psycopg.connect(data_db) as conn:
        writers = conn.execute("SELECT DISTINCT loaded_by FROM example_orders").fetchall()
    assert writers == [(second["execution_id"],)]


def test_the_tutorials_failure_and_its_repair(
    example_api: ExampleApi,
    embedded_env: dict[str, str],
    sample_credentials: Path,
    data_db: str,
) -> None:
    """docs/tutorial.md "When it fails": pages the API refuses fail every shop, the loop
    still completes, `give_up` fails the run; a rerun of the failed items repairs it."""
    with psycopg.connect(data_db, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS example_orders")
    env = {**embedded_env, "NOETL_CREDENTIALS_FILE": str(sample_credentials)}
    api = ["--set", f"api_url={example_api.url}"]
    playbook = str(EXAMPLES / "api_to_postgres.yaml")
    failed = run_cli(["run", playbook, *api, "--set", "page_size=101", "--json"], env)
    assert failed.returncode == 1, failed.stderr
    summary = json.loads(failed.stdout)
    assert (summary["status"], summary["result"]) == ("FAILED", None)
    assert summary["steps"]["load_shop"]["stats"] == {"total": 3, "success": 0, "failed": 3}
    kinds = [(e["step"], e["kind"]) for e in summary["errors"]]
    assert kinds == [("load_shop", "client_error")] * 3 + [("give_up", "python_error")]
    assert "3 shop(s) could not be loaded" in summary["errors"][-1]["message"]

    rerun = run_cli(
        ["rerun", summary["execution_id"], "--failed-items", "--set", "page_size=10", "--json"],
        env,
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    repaired = json.loads(rerun.stdout)
    assert repaired["result"]["rows"] == [{"orders": 50, "shops": 3, "amount": 2662.72}]
    assert orders_by_shop(data_db) == {"amsterdam": (23, 1), "berlin": (12, 1), "lisbon": (15, 1)}


def test_the_tutorial_gives_these_commands() -> None:
    tutorial = (ROOT / "docs" / "tutorial.md").read_text()
    lines = {line.split("#")[0].strip() for line in tutorial.splitlines()}
    for command in TUTORIAL_COMMANDS:
        assert command in lines, command
    # the numbers the tutorial promises are the ones test_api_to_postgres_... checks
    flat = " ".join(tutorial.split())
    for promise in (
        "{orders: 50, shops: 3, amount: 2662.72}",
        "23 + 12 + 15 = 50",
        "11 requests (1 + 7 pages + 3 retries), 3 of them answered 503",
        "{total: 3, success: 3, failed: 0}",
        "{total: 3, success: 0, failed: 3}",
        "3 shop(s) could not be loaded",
    ):
        assert promise in flat, promise


def test_the_example_api(example_api: ExampleApi) -> None:
    base = example_api.url
    assert httpx.get(f"{base}/shops").json() == {"shops": ["amsterdam", "berlin", "lisbon"]}
    page = httpx.get(f"{base}/shops/berlin/orders", params={"page": 1, "page_size": 5}).json()
    assert (page["total"], page["has_more"], len(page["orders"])) == (12, True, 5)
    assert set(page["orders"][0]) == {"id", "customer", "amount", "created_at"}
    assert httpx.get(f"{base}/shops/berlin/orders?page=2").status_code == 503  # once
    last = httpx.get(f"{base}/shops/berlin/orders?page=2").json()
    assert (last["has_more"], [o["id"] for o in last["orders"]]) == (False, [11, 12])
    assert httpx.get(f"{base}/shops/oslo/orders").status_code == 404
    for bad in ("page=0", "page=x", "page_size=101"):
        response = httpx.get(f"{base}/shops/berlin/orders?{bad}")
        assert response.status_code == 400 and "error" in response.json()
    assert httpx.get(f"{base}/nowhere").status_code == 404
    with httpx.Client() as client:  # keep-alive: many calls on one connection, no stall
        for _ in range(20):
            assert client.get(f"{base}/health").json() == {"status": "ok"}


def test_example_api_bad_options(example_api: ExampleApi, embedded_env: dict[str, str]) -> None:
    port = example_api.url.rsplit(":", 1)[1]
    taken = run_cli(["example-api", "--port", port], embedded_env, timeout=30)
    assert taken.returncode == 1 and "Traceback" not in taken.stderr
    assert taken.stderr.strip().splitlines() == [
        f"Error: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
    bad = run_cli(["example-api", "--port", "70000"], embedded_env, timeout=30)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "70000 is not in the range 0<=x<=65535" in bad.stderr
