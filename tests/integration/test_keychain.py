"""`keychain` on real workers: a static value and an OAuth2 token (from a local token
endpoint, its client from the credentials file) used by HTTP and python steps, and
never found in clear anywhere the run left a trace: the engine's tables, `run --json`,
`status`, `events`, `logs`, the HTTP API, the workers' logs.

Resolved values live in the memory of the worker processes only (tools.keychain): a
`global` token is fetched at most once per worker process whatever the number of
executions, an `execution` one once per execution and process, and a token is fetched
again before it expires (the token endpoint refuses an expired one at `/api/whoami`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.support.api import V1, ok, unique, wait_end
from tests.support.token_server import CLIENT_SECRET, TOKEN_PREFIX, TokenServer, token_server
from tests.support.workers import run_cli, run_json

pytestmark = pytest.mark.integration

STATIC_CANARY = "kc-static-canary-41d9a7"
# worker processes of the session fleet: 2 workers, each 2 prefork children
PROCESSES = 4

KEYCHAIN = """
keychain:
  - name: client
    kind: credential
    credential: keychain_client
  - name: api
    kind: oauth2
    scope: {scope}
    endpoint: "{{{{ token_url }}}}"
    headers: {{Content-Type: application/x-www-form-urlencoded}}
    data:
      grant_type: client_credentials
      client_id: "{{{{ keychain.client.client_id }}}}"
      client_secret: "{{{{ keychain.client.client_secret }}}}"
  - name: vendor
    kind: static
    scope: {scope}
    map: {{api_key: {canary}, region: eu-west}}
"""

LEAKY = """
workflow:
  - step: whoami
    tool:
      kind: http
      url: "{{ base_url }}/api/whoami"
      headers: {Authorization: "Bearer {{ token('api') }}"}
    next: {arcs: [{step: each}]}
  - step: each
    loop: {in: "{{ [1, 2, 3, 4] }}", iterator: it, spec: {mode: parallel}}
    tool:
      kind: python
      input:
        it: "{{ iter.it }}"
        tok: "{{ keychain.api.access_token }}"
        key: "{{ keychain.vendor.api_key }}"
      code: |
        import logging
        print(f"item {it} token {tok} key {key}")
        logging.warning("item %s logged %s and %s", it, tok, key)
        result = {"it": it, "echo": [tok, key], "token_looks_right": tok.startswith("kc-oauth")}
    next: {arcs: [{step: echo, when: "{{ event.name == 'loop.done' }}"}]}
  - step: echo
    tool:
      kind: http
      url: "{{ base_url }}/echo"
      headers:
        Authorization: "Bearer {{ keychain.api.access_token }}"
        X-Api-Key: "{{ keychain.vendor.api_key }}"
        X-Region: "{{ keychain.vendor.region }}"
    next: {arcs: [{step: fail}]}
  - step: fail
    tool:
      kind: python
      input: {tok: "{{ token('api') }}", key: "{{ keychain.vendor.api_key }}"}
      code: |
        raise ValueError(f"failed holding {tok} and {key}")
"""

QUIET = """
workflow:
  - step: one
    tool:
      kind: http
      url: "{{ base_url }}/api/whoami"
      headers: {Authorization: "Bearer {{ token('api') }}"}
    next: {arcs: [{step: two}]}
  - step: two
    loop: {in: "{{ [1, 2, 3] }}", iterator: it, spec: {mode: parallel}}
    tool:
      kind: http
      url: "{{ base_url }}/api/whoami"
      headers: {Authorization: "Bearer {{ keychain.api.access_token }}"}
"""


def text(path: str, body: str, scope: str = "global") -> str:
    name = path.rsplit("/", 1)[-1]
    head = f"apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {{name: {name}, path: {path}}}\n"
    return head + KEYCHAIN.format(scope=scope, canary=STATIC_CANARY) + body


@pytest.fixture(scope="module")
def tokens() -> Iterator[TokenServer]:
    with token_server() as server:
        yield server


def run(env: dict[str, str], tmp_path: Path, source: str, tokens: TokenServer, **sets: str) -> Any:
    file = tmp_path / f"pb_{time.monotonic_ns()}.yaml"
    file.write_text(source)
    args = ["run", str(file), "--json", "--set", f"token_url={tokens.token_url}"]
    args += ["--set", f"base_url={tokens.url}"]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return run_json(args, env, timeout=180)


def secrets_of(tokens: TokenServer) -> list[str]:
    return [STATIC_CANARY, CLIENT_SECRET, *tokens.issued]


def assert_hidden(where: str, shown: str, tokens: TokenServer) -> None:
    for secret in secrets_of(tokens):
        assert secret not in shown, f"{secret} in {where}"
    assert TOKEN_PREFIX not in shown, where


def stored_text(dsn: str, execution_id: str) -> str:
    """Every row the engine keeps about the execution (the playbook text aside)."""
    found: list[str] = []
    with psycopg.connect(dsn) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.columns "
                "WHERE column_name = 'execution_id' AND table_schema = 'public'"
            )
        ]
        for table in tables:
            rows = conn.execute(
                f'SELECT t::text FROM "{table}" t WHERE execution_id::text = %s', (execution_id,)
            )
            found.extend(r[0] for r in rows)
    assert len(found) > 20
    return "\n".join(found)


def test_keychain_values_work_and_never_show(
    distributed: dict[str, Any], served: Any, tokens: TokenServer, tmp_path: Path
) -> None:
    env = distributed["env"]
    path = unique("keychain_leaky")
    code, summary, stderr = run(env, tmp_path, text(path, LEAKY), tokens)
    assert code == 1 and summary["status"] == "FAILED", (summary, stderr)
    eid = summary["execution_id"]
    assert tokens.issued, "no token was fetched"
    # the token worked (the endpoint checks it) and went where the templates put it
    steps = json.loads(run_cli(["status", eid, "--json"], env).stdout)
    assert {s["step"]: s["status"] for s in steps["steps"]}["echo"] == "completed"
    [error] = summary["errors"]
    assert error["step"] == "fail"
    assert error["message"].startswith("ValueError: failed holding *** and *** (line 1: "), error

    with httpx.Client(base_url=served.url, timeout=30) as client:
        detail = wait_end(client, eid)
        base = f"{V1}/executions/{eid}"
        api = {
            "detail": detail,
            "events": ok(client.get(f"{base}/events", params={"limit": 1000})),
            "logs": ok(client.get(f"{base}/logs", params={"limit": 1000})),
            "graph": ok(client.get(f"{base}/graph")),
            "list": ok(client.get(f"{V1}/executions", params={"limit": 500})),
        }
    events = api["events"]["events"]
    results = {e["step"]: e for e in events if e["type"] == "command.completed"}
    shown_api = json.dumps(api)
    assert_hidden("the HTTP API", shown_api, tokens)
    # masked, not missing: the values did reach the steps
    assert '"echo": ["***", "***"]' in shown_api and '"token_looks_right": true' in shown_api
    assert "item 1 token *** key ***" in json.dumps(api["logs"])
    assert "logged *** and ***" in json.dumps(api["logs"])
    echoed = json.dumps(results["echo"])
    assert '"authorization": "Bearer ***"' in echoed and '"x-api-key": "***"' in echoed
    # every value of a static entry is taken for a secret (host, port, user, database
    # names aside): the keychain is where a playbook declares its secrets
    assert '"x-region": "***"' in echoed
    assert json.dumps(results["whoami"]).count('"who": "kc-client"') == 1

    cli = {
        "run": json.dumps(summary) + stderr,
        "status": run_cli(["status", eid, "--json"], env).stdout,
        "events": run_cli(["events", eid, "--json", "--limit", "0"], env).stdout,
        "logs": run_cli(["logs", eid, "--json", "--limit", "0"], env).stdout,
    }
    for where, shown in cli.items():
        assert_hidden(f"`{where}`", shown, tokens)
    dsn = distributed["url"].replace("postgresql+psycopg://", "postgresql://")
    assert_hidden("the engine's tables", stored_text(dsn, eid), tokens)
    for worker in distributed["workers"]:
        assert_hidden(f"worker {worker.name}'s log", worker.log.read_text(errors="replace"), tokens)


def test_global_scope_is_shared_by_executions(
    distributed: dict[str, Any], tokens: TokenServer, tmp_path: Path
) -> None:
    source = text(unique("keychain_global"), QUIET)
    before = tokens.total()
    for _ in range(4):
        code, summary, stderr = run(distributed["env"], tmp_path, source, tokens)
        assert code == 0 and summary["status"] == "COMPLETED", (summary, stderr)
    fetched = tokens.total() - before
    # at most one per worker process, however many executions and commands (4 x 4)
    assert 1 <= fetched <= PROCESSES, fetched


def test_execution_scope_is_fetched_per_execution(
    distributed: dict[str, Any], tokens: TokenServer, tmp_path: Path
) -> None:
    source = text(unique("keychain_execution"), QUIET, scope="execution")
    for _ in range(3):
        before = tokens.total()
        code, summary, stderr = run(distributed["env"], tmp_path, source, tokens)
        assert code == 0 and summary["status"] == "COMPLETED", (summary, stderr)
        assert 1 <= tokens.total() - before <= PROCESSES


def test_a_token_is_refreshed_before_it_expires(
    distributed: dict[str, Any], tokens: TokenServer, tmp_path: Path
) -> None:
    # a 4 s token is fetched again once 2 s have passed; a worker that kept using it
    # would be refused by /api/whoami after 4 s
    source = text(unique("keychain_refresh"), QUIET)
    url = f"{tokens.token_url}?expires_in=4"
    before = tokens.total()
    code, summary, stderr = run(distributed["env"], tmp_path, source, tokens, token_url=url)
    assert code == 0, (summary, stderr)
    first = tokens.total() - before
    time.sleep(4.5)  # every token fetched so far has expired
    code, summary, stderr = run(distributed["env"], tmp_path, source, tokens, token_url=url)
    assert code == 0 and summary["status"] == "COMPLETED", (summary, stderr)
    assert tokens.total() - before > first


def test_bad_keychain_fails_the_first_step_with_a_clear_error(
    distributed: dict[str, Any], tokens: TokenServer, tmp_path: Path
) -> None:
    source = text(unique("keychain_bad_client"), QUIET).replace(
        "credential: keychain_client", "credential: no_such_alias"
    )
    code, summary, _ = run(distributed["env"], tmp_path, source, tokens)
    assert code == 1 and summary["status"] == "FAILED"
    # every command fails alike (the arc to `two` has no `when`: it is taken anyway)
    error = summary["errors"][0]
    assert {e["message"] for e in summary["errors"]} == {error["message"]}
    assert error["step"] == "one" and error["kind"] == "config_error"
    assert error["message"].startswith(
        "keychain entry 'client': unknown credential 'no_such_alias' (known aliases: "
    )
    wrong = text(unique("keychain_wrong_secret"), QUIET).replace(
        'client_secret: "{{ keychain.client.client_secret }}"', "client_secret: not-it-x9"
    )
    code, summary, _ = run(distributed["env"], tmp_path, wrong, tokens)
    error = summary["errors"][0]
    assert error["kind"] == "auth" and error["step"] == "one"
    assert error["message"] == (
        f"keychain entry 'api': token endpoint {tokens.token_url} answered HTTP 401 "
        "(invalid_client)"
    )
    assert "not-it-x9" not in json.dumps(summary)


def test_a_cloud_secret_manager_refuses_the_start(
    distributed: dict[str, Any], tokens: TokenServer, tmp_path: Path
) -> None:
    source = text(unique("keychain_gcp"), QUIET).replace(
        "keychain:\n",
        "keychain:\n  - {name: openai, kind: secret_manager, provider: gcp, auth: gcp, "
        "map: {api_key: projects/p/secrets/s}}\n",
    )
    file = tmp_path / "gcp.yaml"
    file.write_text(source)
    before = tokens.total()
    code, out, _ = run_json(["run", str(file), "--json"], distributed["env"])
    assert code == 2 and out["execution_id"] is None and out["status"] == "FAILED", out
    assert out["error"].startswith(
        "keychain entry 'openai' (kind secret_manager, provider gcp) is not supported here: "
        "noetl-celery does not reach secrets from Google Secret Manager (`provider: gcp`); "
        "put the secret in the credentials file"
    )
    assert tokens.total() == before  # refused before anything ran
    validated = run_cli(["validate", str(file)], distributed["env"])
    assert (
        validated.returncode == 0 and "is not supported here" in validated.stderr + validated.stdout
    )
