"""`noetl-celery flower` watching real workers: the engine's tasks are listed with
readable arguments, the API and `/metrics` need the configured basic auth, no secret or
payload reaches what Flower shows, and the workers stop sending task events once Flower
has exited."""

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from noetl_celery.engine.service import Engine
from tests.support.engines import celery_engine
from tests.support.private_services import free_port
from tests.support.token_server import CLIENT_SECRET, TOKEN_PREFIX, token_server

pytestmark = pytest.mark.integration
PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"
AUTH = "admin:flower-test-pass"
TOKEN = "tok-4f1c9e-do-not-leak"  # a payload value: payloads never travel in messages
ENGINE_TASKS = {
    "noetl.execute_command",
    "noetl.execute_commands",
    "noetl.orchestrate",
    "noetl.reap",
}
T = TypeVar("T")
KEYCHAIN_CANARY = "kc-flower-canary-2b7d40"
KEYCHAIN_PLAYBOOK = f"""apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: flower_keychain, path: tests/flower/keychain}}
keychain:
  - {{name: client, kind: credential, credential: keychain_client}}
  - name: api
    kind: oauth2
    endpoint: "{{{{ token_url }}}}"
    data:
      grant_type: client_credentials
      client_id: "{{{{ keychain.client.client_id }}}}"
      client_secret: "{{{{ keychain.client.client_secret }}}}"
  - {{name: vendor, kind: static, map: {{api_key: {KEYCHAIN_CANARY}}}}}
workflow:
  - step: each
    loop: {{in: "{{{{ [1, 2, 3] }}}}", iterator: it}}
    tool:
      kind: python
      input: {{tok: "{{{{ token('api') }}}}", key: "{{{{ keychain.vendor.api_key }}}}"}}
      code: |
        result = {{"echo": [tok, key]}}
    next: {{arcs: [{{step: fail, when: "{{{{ event.name == 'loop.done' }}}}"}}]}}
  - step: fail
    tool:
      kind: python
      input: {{tok: "{{{{ token('api') }}}}", key: "{{{{ keychain.vendor.api_key }}}}"}}
      code: |
        raise ValueError(f"failed holding {{tok}} and {{key}}")
"""


def fetch(url: str, auth: str | None = AUTH) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def get(url: str, auth: str | None = AUTH) -> tuple[int, Any]:
    status, body = fetch(url, auth)
    return status, json.loads(body or b"null")


def poll(check: Callable[[], T | None], what: str, timeout: float = 60) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"no {what} within {timeout}s")


@contextmanager
def flower_process(env: dict[str, str], port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`noetl-celery flower` with basic auth given by the environment (as in compose)."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "noetl_celery.cli.main", "flower", "--port", str(port)],
            env={**env, "NOETL_FLOWER_BASIC_AUTH": AUTH},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def run_side_effect_loop(engine: Engine) -> str:
    execution_id = engine.start_text(
        (PLAYBOOKS / "side_effect_loop.yaml").read_text(), {"n": 20, "api_token": TOKEN}
    )
    assert engine.wait(execution_id, 60).status == "COMPLETED"
    return execution_id


class TaskEvents:
    """Celery publishes task events on its `celeryev` fanout exchange: with Redis, pub/sub
    channels `/<db>.celeryev/<routing key>`. Listening there shows whether the workers
    send them, with or without a monitor."""

    def __init__(self, redis_url: str) -> None:
        db = redis_url.rsplit("/", 1)[-1] or "0"
        self.pubsub = redis.Redis.from_url(redis_url).pubsub()
        self.pubsub.psubscribe(f"/{db}.celeryev/task*")

    def heard(self, execution_id: str, within: float) -> bool:
        """Whether a task event of the execution arrives within `within` seconds."""
        deadline = time.monotonic() + within
        while (left := deadline - time.monotonic()) > 0:
            message = self.pubsub.get_message(timeout=min(left, 0.2))
            if message and message["type"] == "pmessage":
                body = base64.b64decode(json.loads(message["data"])["body"])
                if execution_id.encode() in body:
                    return True
        return False

    def drain(self, within: float = 1.0) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and self.pubsub.get_message(timeout=0.1):
            pass

    def close(self) -> None:
        self.pubsub.close()


def test_flower_lists_the_engines_tasks_readably(
    distributed: dict[str, Any], credentials_file: Path, tmp_path: Path
) -> None:
    canary = json.loads(credentials_file.read_text())["unused_canary"]["db_password"]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "flower.log"
    engine = celery_engine(distributed["url"], distributed["redis_url"], tmp_path)
    events = TaskEvents(distributed["redis_url"])
    try:
        with flower_process(distributed["env"], port, log) as proc:

            def workers() -> dict[str, Any] | None:
                assert proc.poll() is None, log.read_text()
                try:  # refresh: ask the workers now, not Flower's snapshot of its start
                    return get(f"{base}/api/workers?refresh=1")[1]
                except OSError:  # not listening yet
                    return None

            listed = poll(workers, "workers listed by flower")
            assert len(listed) >= 2
            for info in listed.values():
                assert set(info["registered"]) >= ENGINE_TASKS
            assert get(f"{base}/api/workers", auth=None)[0] == 401
            assert get(f"{base}/api/tasks", auth=None)[0] == 401
            assert get(f"{base}/api/tasks", auth="admin:wrong")[0] == 401
            # the Prometheus exporter too (Flower itself serves it to anyone)
            assert fetch(f"{base}/metrics", auth=None)[0] == 401
            assert fetch(f"{base}/metrics", auth="admin:wrong")[0] == 401
            status, metrics = fetch(f"{base}/metrics")
            assert status == 200 and b"flower_" in metrics, metrics[:200]
            assert fetch(f"{base}/healthcheck", auth=None) == (200, b"OK")  # probes

            def shown_run() -> tuple[str, list[dict[str, Any]]] | None:
                # workers send task events once Flower's broadcast reached them (it repeats
                # every 5 s); a run before that leaves no trace, so run again
                execution_id = run_side_effect_loop(engine)
                if not events.heard(execution_id, within=2):
                    return None

                def in_flower() -> list[dict[str, Any]]:
                    tasks = get(f"{base}/api/tasks")[1] or {}
                    return [t for t in tasks.values() if execution_id in str(t["args"])]

                return execution_id, poll(in_flower, "the run's tasks in flower", 10)

            execution_id, mine = poll(shown_run, "run shown by flower")
            names = {t["name"] for t in mine}
            assert "noetl.execute_command" in names and names <= ENGINE_TASKS
            assert any("step=each" in t["args"] for t in mine), [t["args"] for t in mine]
            # ids spelled out, and the engine database's identity: nothing else
            database = {"db": engine.database_id}
            for task in mine:
                assert task["args"].split()[0] == f"execution={execution_id}"
                assert task["kwargs"] == str(database) and len(task["args"]) < 200
            shown = json.dumps([get(f"{base}/api/{what}")[1] for what in ("tasks", "workers")])
            assert canary not in shown and TOKEN not in shown
            assert canary not in log.read_text()

            # a run using keychain values (a static one, an OAuth token): none of them
            # in the tasks' args, kwargs, results or exceptions Flower shows
            with token_server() as tokens:
                keyed = engine.start_text(KEYCHAIN_PLAYBOOK, {"token_url": tokens.token_url})
                assert engine.wait(keyed, 60).status == "FAILED"

                def keyed_tasks() -> list[dict[str, Any]]:
                    tasks = get(f"{base}/api/tasks")[1] or {}
                    found = [t for t in tasks.values() if keyed in str(t["args"])]
                    done = [t for t in found if t["state"] in ("SUCCESS", "FAILURE")]
                    return found if len(done) >= 4 else []

                poll(keyed_tasks, "the keychain run's tasks in flower", 20)
                shown = json.dumps([get(f"{base}/api/{w}")[1] for w in ("tasks", "workers")])
                assert tokens.issued
                for secret in (KEYCHAIN_CANARY, CLIENT_SECRET, *tokens.issued):
                    assert secret not in shown and secret not in log.read_text()
                assert TOKEN_PREFIX not in shown
        assert proc.returncode == 0, log.read_text()

        # Flower has exited and asked the workers to stop sending task events
        events.drain()
        poll(
            lambda: not events.heard(run_side_effect_loop(engine), within=2),
            "run without task events once flower is gone",
            timeout=30,
        )
    finally:
        events.close()
        engine.close()


def test_flower_needs_a_broker(embedded_env: dict[str, str]) -> None:
    from tests.support.workers import run_cli

    proc = run_cli(["flower"], embedded_env)
    assert proc.returncode == 2 and "NOETL_BROKER_URL" in proc.stderr


def test_flower_refuses_framing_and_cross_site_page_actions(
    distributed: dict[str, Any], tmp_path: Path
) -> None:
    """Every answer of Flower (its own pages, API and files, and the pages added to it)
    refuses framing; the added pages' buttons refuse another site and bodies that are
    not their form."""
    import httpx

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    auth = httpx.BasicAuth(*AUTH.split(":", 1))
    with flower_process(distributed["env"], port, tmp_path / "flower.log") as proc:

        def up() -> bool:
            assert proc.poll() is None, (tmp_path / "flower.log").read_text()
            try:
                return httpx.get(f"{base}/healthcheck").status_code == 200
            except httpx.TransportError:
                return False

        poll(up, "flower answering")
        for path in (
            "/",
            "/tasks",
            "/workers",
            "/executions",
            "/schedules",
            "/api/workers",
            "/pages-static/pages.css",
            "/healthcheck",
            "/nothing-here",
        ):
            answer = httpx.get(base + path, auth=auth)
            assert answer.headers.get("x-frame-options") == "DENY", path
            assert "frame-ancestors 'none'" in answer.headers["content-security-policy"], path
        unauthorised = httpx.get(f"{base}/executions")
        assert unauthorised.status_code == 401
        assert unauthorised.headers.get("x-frame-options") == "DENY"

        form = {"Content-Type": "application/x-www-form-urlencoded"}
        for headers in ({"Origin": "http://127.0.0.2:9"}, {"Sec-Fetch-Site": "cross-site"}):
            refused = httpx.post(
                f"{base}/executions/0/cancel", auth=auth, headers={**form, **headers}, content="a=b"
            )
            assert refused.status_code == 403, refused.text
        own = {"Origin": base, "Sec-Fetch-Site": "same-origin"}
        plain = httpx.post(
            f"{base}/schedules/1/trigger",
            auth=auth,
            headers={**own, "Content-Type": "text/plain"},
            content="a=b",
        )
        assert plain.status_code == 415 and "application/x-www-form-urlencoded" in plain.text
        # the contrast: the same button from Flower's own page reaches the engine
        missing = httpx.post(
            f"{base}/executions/no-such-id/cancel",
            auth=auth,
            headers={**own, **form},
            content="a=b",
        )
        assert missing.status_code == 404, missing.text
