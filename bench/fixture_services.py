"""What a NoETL e2e fixture needs outside this machine (bench.noetl_fixtures --layout e2e).

`document_kind` says whether a YAML file is a DSL v2 playbook at all (e2e's `fixtures/`
also holds test configuration and `Subscription` resources); `services` names each cloud
or external service a playbook needs (GCS, Snowflake, Kafka, NATS, OpenAI, a kind
cluster's services, public URL hosts, NoETL's server API ...), read from the parsed
document (comments do not count): its tool kinds, its keychain providers, the hosts of
its URLs and the credentials its steps name. An empty answer means self-contained: it
runs here, against the compat kit's test API server and the local Postgres, with the
in-cluster names of both rewritten (`LOCAL_REWRITES`).
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

API_VERSION = "noetl.io/v2"
# e2e's own test API server (its Docker image runs `python paginated_api.py 5555`)
CHECKOUT_API_SERVER = "fixtures/servers/paginated_api.py"
TEST_SERVER_HOST = "paginated-api.test-server.svc.cluster.local"
PG_CLUSTER_HOST = "postgres.postgres.svc.cluster.local"
# hosts a self-contained fixture may name: this machine, the test API server and the
# Postgres (both rewritten in the temporary copy), and a name meant never to resolve
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", TEST_SERVER_HOST, PG_CLUSTER_HOST}) | frozenset(
    {"this-host-deliberately-does-not-exist.invalid"}
)
# tool kinds that reach a service (other kinds this engine lacks, such as `shell`, need
# none: such fixtures run and fail naming the kind)
SERVICE_KINDS = {
    "snowflake": "Snowflake",
    "snowflake_transfer": "Snowflake",
    "gcs": "GCS",
    "nats": "NATS",
    "kafka": "Kafka",
    "container": "a kind cluster (container jobs)",
    "script": "a kind cluster (script jobs)",
    "gateway": "NoETL gateway",
    "agent": "an LLM agent service",
    "mcp": "an MCP server",
    "subscription": "NoETL server (subscriptions)",
    # DuckLake is a DuckDB extension fetched from extensions.duckdb.org on first use
    "ducklake": "DuckDB's ducklake extension (downloaded from extensions.duckdb.org)",
}
# keychain entries: (kind, provider) -> service
KEYCHAIN_SERVICES: dict[tuple[Any, Any], str] = {
    ("secrets", "gcp"): "GCP Secret Manager",
    ("secrets", "aws"): "AWS Secrets Manager",
    ("google_id_token", None): "GCP (ID tokens)",
    ("oauth", None): "an OAuth provider",
}
# in-cluster hosts of e2e's kind cluster, and public API hosts, by what they are
HOST_SERVICES = (
    (re.compile(r"^kafka\."), "Kafka"),
    (re.compile(r"^fake-gcs-server\.|^storage\.googleapis\.com$"), "GCS"),
    (re.compile(r"^pubsub-emulator\.|^pubsub\.googleapis\.com$"), "GCP Pub/Sub"),
    (re.compile(r"^clickhouse\."), "ClickHouse"),
    (re.compile(r"^noetl(-server-rust)?\.noetl\.svc"), "NoETL server API"),
    (re.compile(r"^gateway\.gateway\.svc"), "NoETL gateway"),
    (re.compile(r"\.svc\.cluster\.local$"), "a kind cluster"),
    (re.compile(r"^api\.openai\.com$"), "OpenAI"),
    (re.compile(r"\.googleapis\.com$"), "GCP APIs"),
    (re.compile(r"amadeus\.com$"), "Amadeus API"),
)
# credential names by the service they open (the rest are Postgres aliases: local)
CREDENTIAL_SERVICES = (
    (re.compile(r"^(sf_|snowflake)"), "Snowflake"),
    (re.compile(r"^(google_|gcp_|gcs_)"), "GCP credentials"),
    (re.compile(r"^nats"), "NATS"),
    (re.compile(r"^kafka"), "Kafka"),
    (re.compile(r"^auth0"), "Auth0"),
    (re.compile(r"^(ib_|ibkr)"), "Interactive Brokers"),
    (re.compile(r"^(openai|amadeus)"), "OpenAI"),
    (re.compile(r"^(s3_|aws_|minio)"), "S3"),
)
URL = re.compile(r"\b(?:https?|wss?|nats|kafka|postgres(?:ql)?)://(?:[^@/\s]+@)?([A-Za-z0-9_.-]+)")
BARE_CLUSTER_HOST = re.compile(r"\b([a-z0-9-]+\.[a-z0-9-]+\.svc\.cluster\.local)\b")
OBJECT_URI = {"gs://": "GCS", "s3://": "S3"}
# SQL on NoETL's own schema (its catalog, events, executions): its server's database
NOETL_TABLES = re.compile(r"\b(from|join|into|update|table)\s+noetl\.\w+", re.IGNORECASE)
AUTH_KEY = re.compile(r"(^|_)(auth|credential|credential_name)$")
TEMPLATE_NAME = re.compile(r"^\{\{\s*([A-Za-z_]\w*)\s*\}\}$")
TEMPLATE_DEFAULT = re.compile(r"^\{\{.*\|\s*default\(\s*['\"]([\w-]+)['\"]\s*\)\s*\}\}$")
# host programs a `shell` step drives: a kind cluster and its tools on this machine
HOST_TOOLS = re.compile(r"\b(kubectl|kind|docker|helm|gcloud)\s")
NAME = re.compile(r"^[A-Za-z_][\w-]*$")
NAME_PATH = re.compile(r"^[\w-]+(/[\w-]+)+$")
SUBSCRIPTION_SERVICE = "NoETL server (subscription delivery)"


def document_kind(data: Any) -> str | None:
    """None for a DSL v2 playbook; else why the document is not one."""
    if not isinstance(data, dict):
        return "not a mapping"
    kind, version = data.get("kind"), data.get("apiVersion")
    if not kind and not version:
        return "no apiVersion or kind: not a NoETL resource"
    if kind != "Playbook":
        return f"a {kind} resource ({version}), not a Playbook"
    if version != API_VERSION:
        return f"apiVersion {version!r}, not {API_VERSION}"
    if "workflow" not in data:
        return "no workflow"
    return None


def subscription_targets(data: Any) -> set[str]:
    """The catalog paths a `Subscription` resource delivers its messages to: handler
    playbooks that read `workload.message`, which NoETL's server fills per delivery."""
    if not (isinstance(data, dict) and data.get("kind") == "Subscription"):
        return set()
    return {text for text in strings(data.get("spec")) if NAME_PATH.match(text)}


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)


def mappings(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from mappings(value)
    elif isinstance(node, list):
        for item in node:
            yield from mappings(item)


def host_service(host: str) -> str | None:
    if host in LOCAL_HOSTS or "{" in host:
        return None
    for pattern, service in HOST_SERVICES:
        if pattern.search(host):
            return service
    return f"public URL {host}"


def credential_names(data: dict[str, Any]) -> set[str]:
    """The credential names the document's steps and workload give (`auth: pg_k8s`,
    `pg_auth: pg_local`, `auth: "{{ pg_auth }}"` resolved against the workload)."""
    given = data.get("workload")
    workload: dict[str, Any] = given if isinstance(given, dict) else {}
    names: set[str] = set()
    for node in mappings(data):
        for key, value in node.items():
            if not (isinstance(key, str) and AUTH_KEY.search(key) and isinstance(value, str)):
                continue
            for _ in range(3):  # `{{ name }}` -> the workload's value -> its `default('x')`
                ref = TEMPLATE_NAME.match(value.strip())
                fallback = TEMPLATE_DEFAULT.match(value.strip())
                if ref:
                    value = str(workload.get(ref.group(1), ""))
                elif fallback:
                    value = fallback.group(1)
            if NAME.match(value.strip()):
                names.add(value.strip())
    return names


def credential_service(name: str) -> str | None:
    for pattern, service in CREDENTIAL_SERVICES:
        if pattern.search(name):
            return service
    return None


def keychain_services(data: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    keychain = data.get("keychain")
    for entry in keychain if isinstance(keychain, list) else []:
        if isinstance(entry, dict):
            kind, provider = entry.get("kind"), entry.get("provider")
            service = KEYCHAIN_SERVICES.get((kind, provider)) or KEYCHAIN_SERVICES.get((kind, None))
            if service:
                found.add(service)
    return found


def services(data: dict[str, Any]) -> list[str]:
    """The services a playbook needs, sorted; [] when it is self-contained."""
    found = keychain_services(data)
    for node in mappings({"workflow": data.get("workflow"), "workbook": data.get("workbook")}):
        kind = node.get("kind")
        if isinstance(kind, str) and kind in SERVICE_KINDS:
            found.add(SERVICE_KINDS[kind])
        if kind == "shell" and any(HOST_TOOLS.search(text) for text in strings(node)):
            found.add("a kind cluster (kubectl, docker)")
    for text in strings({k: v for k, v in data.items() if k != "metadata"}):
        for host in URL.findall(text) + BARE_CLUSTER_HOST.findall(text):
            service = host_service(host)
            if service:
                found.add(service)
        if NOETL_TABLES.search(text):
            found.add("NoETL server database (noetl.* tables)")
        for prefix, service in OBJECT_URI.items():
            if prefix in text and not text.strip().startswith("#"):
                found.add(service)
    for name in credential_names(data):
        service = credential_service(name)
        if service:
            found.add(service)
    return sorted(found)


def local_credentials(data: dict[str, Any]) -> set[str]:
    """The credential names of a self-contained playbook: all point at the local Postgres."""
    return {n for n in credential_names(data) if credential_service(n) is None}


def rewrite(text: str, api_url: str, pg_host: str = "127.0.0.1") -> str:
    """The temporary copy's text: the in-cluster test API server and Postgres replaced by
    the compat kit's server and the local Postgres."""
    return text.replace(f"http://{TEST_SERVER_HOST}:5555", api_url).replace(
        PG_CLUSTER_HOST, pg_host
    )


class CheckoutApiServer:
    """The checkout's own test API server on a free local port: its routes are the ones
    its fixtures call (the compat kit's server answers NoETL's older set)."""

    def __init__(self, script: Path, log: Path) -> None:
        self.script, self.log_path = script, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait_s: float = 30.0) -> None:
        self.log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(self.script), str(self.port)],
            cwd=self.script.parent,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.script} did not answer /health (log: {self.log_path})")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self.log is not None:
            self.log.close()
            self.log = None
