"""`noetl-celery flower` watching real workers: the engine's tasks are listed with
readable arguments, the API needs the configured basic auth, and nothing of a run's
payload (here a token) reaches Celery messages."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.engines import celery_engine
from tests.support.private_services import free_port

pytestmark = pytest.mark.integration
PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"
AUTH = "admin:flower-test-pass"
TOKEN = "tok-4f1c9e-do-not-leak"


def get(url: str, auth: str | None = AUTH) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


def poll(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except OSError:  # not listening yet
            value = None
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"{what} within {timeout}s")


def test_flower_lists_the_engines_tasks_readably(
    distributed: dict[str, Any], tmp_path: Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "noetl_celery.cli.main",
            "flower",
            "--port",
            str(port),
            "--basic-auth",
            AUTH,
        ],
        env=distributed["env"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    engine = celery_engine(distributed["url"], distributed["redis_url"], tmp_path)
    try:
        workers = poll(lambda: get(f"{base}/api/workers")[1], "flower lists the workers")
        assert len(workers) >= 2
        assert get(f"{base}/api/workers", auth=None)[0] == 401
        assert get(f"{base}/api/workers", auth="admin:wrong")[0] == 401

        def run_and_find() -> list[dict[str, Any]]:
            eid = engine.start_text(
                (PLAYBOOKS / "side_effect_loop.yaml").read_text(),
                {"n": 5, "api_token": TOKEN},
            )
            assert engine.wait(eid, 60).status == "COMPLETED"
            tasks = get(f"{base}/api/tasks")[1] or {}
            return [t for t in tasks.values() if eid in str(t.get("args"))]

        # workers send task events once Flower has asked them to (a few seconds)
        mine = poll(run_and_find, "flower shows the run's tasks")
        names = {t["name"] for t in mine}
        assert "noetl.execute_command" in names
        each = [t for t in mine if "step=each" in str(t["args"])]
        assert each and all("execution=" in t["args"] for t in each)
        everything = json.dumps(get(f"{base}/api/tasks")[1]) + json.dumps(
            get(f"{base}/api/workers")[1]
        )
        assert TOKEN not in everything
    finally:
        engine.close()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)


def test_flower_needs_a_broker(embedded_env: dict[str, str]) -> None:
    from tests.support.workers import run_cli

    proc = run_cli(["flower"], embedded_env)
    assert proc.returncode == 1 and "NOETL_BROKER_URL" in proc.stderr
