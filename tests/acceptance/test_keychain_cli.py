"""`keychain` in the embedded mode (`noetl-celery run` on SQLite, commands on threads of
the one process): every kind, the token fetched once per run and shared by the threads,
values masked in what the run shows and stores, and the errors a user sees."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.readme import DOCS, examples
from tests.support.token_server import (
    CLIENT_ID,
    CLIENT_SECRET,
    TOKEN_PREFIX,
    TokenServer,
    token_server,
)
from tests.support.workers import run_cli, run_json

BEARER = "kc-bearer-canary-77ab01"
STATIC = "kc-static-canary-e3f019"

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: kc_embedded, path: tests/keychain/embedded}}
workload:
  bearer_value: {bearer}
keychain:
  - {{name: client, kind: credential_ref, ref: keychain_client}}
  - name: api
    kind: oauth2
    scope: {scope}
    endpoint: "{{{{ token_url }}}}"
    data:
      grant_type: client_credentials
      client_id: "{{{{ keychain.client.client_id }}}}"
      client_secret: "{{{{ keychain.client.client_secret }}}}"
  - {{name: other, kind: bearer, token: "{{{{ workload.bearer_value }}}}"}}
  - name: vendor
    kind: static
    map: {{api_key: {static}, sig: "{{{{ keychain.other.access_token }}}}-signed"}}
workflow:
  - step: whoami
    tool:
      kind: http
      url: "{{{{ base_url }}}}/api/whoami"
      headers: {{Authorization: "Bearer {{{{ token('api') }}}}"}}
    next: {{arcs: [{{step: each}}]}}
  - step: each
    loop:
      in: "{{{{ range(8) | list }}}}"
      iterator: it
      spec: {{mode: parallel, max_in_flight: 4}}
    tool:
      kind: python
      input:
        it: "{{{{ iter.it }}}}"
        values: ["{{{{ token('api') }}}}", "{{{{ keychain.other.access_token }}}}",
                 "{{{{ keychain.vendor.api_key }}}}", "{{{{ keychain.vendor.sig }}}}"]
      code: |
        print("item", it, "holds", values)
        result = {{"it": it, "values": values, "lengths": [len(v) for v in values]}}
"""


@pytest.fixture(scope="module")
def tokens() -> Iterator[TokenServer]:
    with token_server() as server:
        yield server


def run(env: dict[str, str], tmp_path: Path, tokens: TokenServer, scope: str = "global") -> Any:
    file = tmp_path / f"kc_{scope}.yaml"
    file.write_text(PLAYBOOK.format(bearer=BEARER, static=STATIC, scope=scope))
    sets = ["--set", f"token_url={tokens.token_url}", "--set", f"base_url={tokens.url}"]
    return run_json(["run", str(file), "--json", *sets], env)


@pytest.mark.parametrize("scope", ["global", "execution"])
def test_every_kind_in_one_run(
    embedded_env: dict[str, str], tmp_path: Path, tokens: TokenServer, scope: str
) -> None:
    before = tokens.total()
    code, summary, stderr = run(embedded_env, tmp_path, tokens, scope)
    assert code == 0 and summary["status"] == "COMPLETED", (summary, stderr)
    # nine commands on four threads, one token request
    assert tokens.total() - before == 1
    token = tokens.issued[-1]
    eid = summary["execution_id"]
    events = run_cli(["events", eid, "--json", "--limit", "0"], embedded_env).stdout
    completed = [
        e for e in json.loads(events) if e["type"] == "command.completed" and e["step"] == "each"
    ]
    assert len(completed) == 8
    lengths = [len(token), len(BEARER), len(STATIC), len(BEARER) + len("-signed")]
    for event in completed:
        data = json.dumps(event)
        assert '"values": ["***", "***", "***", "***"]' in data, data
        assert json.dumps(lengths) in data  # the real values reached the step
    logs = run_cli(["logs", eid, "--json", "--limit", "0"], embedded_env).stdout
    assert "holds ['***', '***', '***', '***']" in logs
    shown = "\n".join(
        [
            json.dumps(summary),
            stderr,
            events,
            logs,
            run_cli(["status", eid, "--json"], embedded_env).stdout,
        ]
    )
    database = Path(embedded_env["NOETL_HOME"]) / "noetl.sqlite3"
    with sqlite3.connect(database) as conn:
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            if table != "catalog":  # the playbook as written (its bearer value too)
                shown += "\n".join(str(row) for row in conn.execute(f'SELECT * FROM "{table}"'))
    # the workload variable the bearer entry is rendered from is stored with the
    # execution's variables like any input: only there may its value show
    shown = shown.replace(f'"bearer_value":"{BEARER}"', "").replace(f"bearer_value: {BEARER}", "")
    for secret in (token, BEARER, STATIC, CLIENT_SECRET, TOKEN_PREFIX):
        assert secret not in shown, secret


def test_undefined_name_in_an_entry_names_it(
    embedded_env: dict[str, str], tmp_path: Path, tokens: TokenServer
) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text(
        PLAYBOOK.format(bearer=BEARER, static=STATIC, scope="global").replace(
            "{{ workload.bearer_value }}", "{{ workload.nope }}"
        )
    )
    code, summary, _ = run_json(["run", str(file), "--json"], embedded_env)
    assert code == 1 and summary["status"] == "FAILED"
    message = summary["errors"][0]["message"]
    assert message.startswith("undefined ") and "keychain entry 'client'" not in message
    assert "token_url" in message  # the first entry that needs a missing name: `api`
    assert "in keychain entry 'api'.endpoint" in message


def test_keychain_is_not_readable_where_the_engine_decides(
    embedded_env: dict[str, str], tmp_path: Path, tokens: TokenServer
) -> None:
    """Arc guards and `set` are evaluated by the orchestrator, which never holds a
    resolved value (a `set` would store it in the execution's variables)."""
    text = PLAYBOOK.format(bearer=BEARER, static=STATIC, scope="global").replace(
        "    next: {arcs: [{step: each}]}",
        '    next: {arcs: [{step: each, set: {tok: "{{ keychain.api.access_token }}"}}]}',
    )
    file = tmp_path / "set.yaml"
    file.write_text(text)
    sets = ["--set", f"token_url={tokens.token_url}", "--set", f"base_url={tokens.url}"]
    code, summary, stderr = run_json(["run", str(file), "--json", *sets], embedded_env)
    assert code == 1 and summary["status"] == "FAILED", (summary, stderr)
    assert "'keychain' is undefined" in json.dumps(summary["errors"]), summary


def test_the_docs_example_runs(
    embedded_env: dict[str, str], tmp_path: Path, tokens: TokenServer
) -> None:
    [example] = examples(DOCS / "reference" / "keychain.md")
    credentials = tmp_path / "credentials.json"
    vendor = {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "signing_key": STATIC}
    credentials.write_text(json.dumps({"vendor_oauth": vendor}))
    env = {**embedded_env, "NOETL_CREDENTIALS_FILE": str(credentials)}
    file = tmp_path / "keychain_example.yaml"
    file.write_text(example.playbook())
    code, summary, stderr = run_json(
        ["run", str(file), "--json", "--set", f"vendor_url={tokens.url}"], env
    )
    assert code == 0 and summary["status"] == "COMPLETED", (summary, stderr)
    report = summary["steps"]["report"]
    assert report["status_code"] == 200 and report["data"]["who"] == CLIENT_ID
    sent = report["data"]["headers"]
    assert sent["authorization"] == "Bearer ***" and sent["x-signature-key"] == "***"


def test_only_steps_that_use_the_keychain_resolve_it(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    from tests.support.private_services import free_port

    down = f"http://127.0.0.1:{free_port()}/token"  # nothing listens there
    file = tmp_path / "down.yaml"
    file.write_text(
        f"""apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: kc_down}}
keychain:
  - {{name: api, kind: oauth2, endpoint: "{down}", data: {{grant_type: client_credentials}}}}
workflow:
  - step: plain
    tool: {{kind: python, code: "result = {{'ok': True}}"}}
    next: {{arcs: [{{step: uses}}]}}
  - step: uses
    tool: {{kind: python, input: {{t: "{{{{ token('api') }}}}"}}, code: "result = {{}}"}}
"""
    )
    code, summary, _ = run_json(["run", str(file), "--json"], embedded_env)
    assert code == 1 and summary["status"] == "FAILED"
    assert summary["steps"]["plain"] == {"ok": True}
    [error] = summary["errors"]
    assert error["step"] == "uses" and error["kind"] == "connection"
    assert error["message"] == (
        f"keychain entry 'api': token endpoint {down} is unreachable (ConnectError)"
    )


def test_a_child_with_a_cloud_entry_fails_at_its_start(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    """A sub-playbook is started by the engine, not by `run`: its first command fails
    with the same message, and so does the calling task."""
    child = tmp_path / "child.yaml"
    child.write_text(
        """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: kc_child, path: tests/keychain/child}
keychain:
  - {name: s, kind: secret_manager, provider: aws, map: {k: arn}}
workflow:
  - step: start
    tool: {kind: noop}
"""
    )
    registered = run_cli(["catalog", "register", str(child)], embedded_env)
    assert registered.returncode == 0, registered.stderr
    parent = tmp_path / "parent.yaml"
    parent.write_text(
        """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: kc_parent}
workflow:
  - step: call
    tool: {kind: playbook, path: tests/keychain/child, return_step: start}
"""
    )
    code, summary, _ = run_json(["run", str(parent), "--json"], embedded_env)
    assert code == 1 and summary["status"] == "FAILED"
    [error] = summary["errors"]
    assert error["step"] == "call"
    assert "keychain entry 's' (kind secret_manager, provider aws) is not supported here" in (
        json.dumps(summary)
    )


@pytest.mark.parametrize(
    ("provider", "backend"),
    [
        ("vault", "HashiCorp Vault"),
        ("aws", "AWS Secrets Manager"),
        ("azure", "Azure Key Vault"),
        ("gcp", "Google Secret Manager"),
        ("k8s", "Kubernetes secrets"),
    ],
)
def test_a_provider_entry_is_refused_before_the_start(
    embedded_env: dict[str, str], tmp_path: Path, provider: str, backend: str
) -> None:
    """NoETL's server reads such an entry from a secret backend; here the run is refused
    before anything is created, naming the entry, the provider and what works instead."""
    file = tmp_path / "provider.yaml"
    file.write_text(
        f"""apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: kc_provider}}
keychain:
  - {{name: api, kind: secrets, provider: {provider}, map: {{api_key: "path/to/key"}}}}
workflow:
  - step: start
    tool: {{kind: python, code: "return 1"}}
"""
    )
    checked = run_cli(["validate", str(file)], embedded_env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "field 'keychain[0].provider': warning: keychain entry 'api'" in checked.stdout + (
        checked.stderr
    )
    code, summary, _ = run_json(["run", str(file), "--json"], embedded_env)
    assert code == 2 and summary["status"] == "FAILED" and summary["execution_id"] is None
    message = summary["error"]
    assert message.startswith(
        f"keychain entry 'api' (kind secrets, provider {provider}) is not supported here: "
        f"noetl-celery does not reach secrets from {backend} (`provider: {provider}`)"
    )
    assert "kind: credential" in message and "NOETL_CREDENTIALS_FILE" in message
    assert "the kinds that work here: bearer, credential, credential_ref, oauth2, static" in (
        message
    )
    listed = run_cli(["executions", "--json"], embedded_env)
    assert json.loads(listed.stdout or "[]") == [], listed.stdout  # nothing was created
