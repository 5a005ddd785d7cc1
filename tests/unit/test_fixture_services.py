"""bench.fixture_services: which e2e fixtures are playbooks, and what each needs."""

from __future__ import annotations

from typing import Any

import yaml

from bench.fixture_services import (
    document_kind,
    local_credentials,
    rewrite,
    services,
    subscription_targets,
)


def doc(text: str) -> Any:
    return yaml.safe_load(text)


HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: t}\n"


def test_documents_that_are_not_playbooks_say_what_they_are() -> None:
    assert document_kind(doc("version: 1.0\nplaybooks: []")) == (
        "no apiVersion or kind: not a NoETL resource"
    )
    sub = document_kind(doc("apiVersion: noetl.io/v1\nkind: Subscription\nspec: {}"))
    assert sub is not None and "noetl.io/v1" in sub
    other = document_kind(doc("apiVersion: noetl.io/v2\nkind: Credential\ndata: {}"))
    assert other == "a Credential resource (noetl.io/v2), not a Playbook"
    old = document_kind(doc("apiVersion: noetl.io/v1\nkind: Playbook\nworkflow: []"))
    assert old == "apiVersion 'noetl.io/v1', not noetl.io/v2"
    assert document_kind(doc(HEAD + "workflow: []")) is None


def test_subscription_targets_are_its_handler_paths() -> None:
    sub = doc(
        "apiVersion: noetl.io/v1\nkind: Subscription\nmetadata: {path: subs/a}\n"
        "spec: {dispatch: {playbook: tests/fixtures/handler, mode: async}}"
    )
    assert subscription_targets(sub) == {"tests/fixtures/handler"}
    assert subscription_targets(doc(HEAD + "workflow: []")) == set()


def test_self_contained_playbook_needs_nothing() -> None:
    data = doc(
        HEAD
        + """
# a comment naming https://api.openai.com does not count
workload:
  pg_auth: pg_k8s
  api: http://paginated-api.test-server.svc.cluster.local:5555/api/v1
  db_host: postgres.postgres.svc.cluster.local
workflow:
  - step: start
    tool: {kind: shell, cmd: "echo hi"}
  - step: load
    tool: {kind: postgres, auth: "{{ pg_auth }}", query: "select 1"}
  - step: fetch
    tool: {kind: http, url: "{{ workload.api }}/items", method: GET}
"""
    )
    assert services(data) == []
    assert local_credentials(data) == {"pg_k8s"}


def test_services_from_kinds_hosts_keychain_and_credentials() -> None:
    data = doc(
        HEAD
        + """
workload:
  sf_auth: sf_test
  cred: "{{ cred | default('auth0_client') }}"
keychain:
  - {name: key, kind: secrets, provider: gcp, scope: global}
  - {name: a0, kind: credential, credential: "{{ cred }}"}
workflow:
  - step: a
    tool: {kind: snowflake, auth: "{{ sf_auth }}", query: "select 1"}
  - step: b
    tool: {kind: http, url: "https://api.openai.com/v1/chat"}
  - step: c
    tool: {kind: python, code: "x = 'kafka.kafka.svc.cluster.local:9092'"}
  - step: d
    tool: {kind: duckdb, query: "copy t to 'gs://bucket/x.parquet'"}
  - step: e
    tool: {kind: http, url: "https://httpbin.org/get"}
  - step: f
    tool: {kind: shell, cmd: "kubectl get pods"}
  - step: g
    tool: {kind: postgres, auth: pg_k8s, query: "SELECT count(*) FROM noetl.catalog"}
"""
    )
    assert services(data) == [
        "Auth0",
        "GCP Secret Manager",
        "GCS",
        "Kafka",
        "NoETL server database (noetl.* tables)",
        "OpenAI",
        "Snowflake",
        "a kind cluster (kubectl, docker)",
        "public URL httpbin.org",
    ]


def test_rewrite_points_in_cluster_names_at_local_services() -> None:
    text = (
        "url: http://paginated-api.test-server.svc.cluster.local:5555/api\n"
        "host: postgres.postgres.svc.cluster.local\n"
    )
    assert rewrite(text, "http://127.0.0.1:4321") == (
        "url: http://127.0.0.1:4321/api\nhost: 127.0.0.1\n"
    )


def test_a_parent_needs_what_its_children_need() -> None:
    from bench.noetl_fixtures import Fixture, classify_e2e, inherit_needs

    child = Fixture("c.yaml", HEAD.replace("path: t", "path: kids/c") + NEEDS_HTTPBIN)
    parent = Fixture(
        "p.yaml", HEAD + "workflow:\n  - step: a\n    tool: {kind: playbook, path: kids/c}\n"
    )
    for fx in (child, parent):
        classify_e2e(fx)
    assert parent.needs == []
    inherit_needs([child, parent])
    assert parent.needs == child.needs == ["public URL httpbin.org"]


NEEDS_HTTPBIN = "workflow:\n  - step: a\n    tool: {kind: http, url: 'https://httpbin.org/get'}\n"
