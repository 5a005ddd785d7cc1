"""The files docs/operations/deployment.md tells operators to use (issue 32): the
Dockerfile's non-root user, the systemd units, `docker compose up --scale worker=N`, and
the Kubernetes manifests, checked against the Kubernetes schemas `kubernetes-validate`
ships (offline). Every command they run is parsed by the real `noetl-celery` command line
(tests.unit.test_compose.parse); no docker, systemd or cluster is needed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from noetl_celery.settings import Settings
from tests.unit.test_compose import dockerfile_stages, parse, services

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "deploy" / "systemd"
KUBERNETES = ROOT / "deploy" / "kubernetes"
UNITS = ("noetl-worker@.service", "noetl-beat.service", "noetl-serve.service")
# the schemas of this Kubernetes version (the newest the package ships)
K8S_VERSION = kubernetes_validate.latest_version()
SHUTDOWN_SECONDS = Settings().worker_shutdown_seconds


# ---- Dockerfile -----------------------------------------------------------------------------
def image_user() -> str:
    """The USER of the runtime stage (after the last FROM); fails when there is none."""
    final = dockerfile_stages()[-1][1]
    users = [i.split(None, 1)[1].strip() for i in final if i.upper().startswith("USER ")]
    assert users, "the runtime stage (after the last FROM) sets no USER: it would run as root"
    return users[-1]


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    final = dockerfile_stages()[-1][1]
    user = image_user()
    uid, _, gid = user.partition(":")
    # numeric: Kubernetes' runAsNonRoot can only check a number
    assert uid.isdigit() and int(uid) != 0, f"USER {user}: a numeric uid other than 0"
    assert not gid or (gid.isdigit() and int(gid) != 0), f"USER {user}"
    # nothing runs as root after it, and the entrypoint is still noetl-celery
    after = final[[i.upper().startswith("USER ") for i in final].index(True) :]
    assert not any(i.upper().startswith("RUN ") for i in after)
    entrypoints = [i for i in final if i.upper().startswith("ENTRYPOINT ")]
    assert entrypoints == ['ENTRYPOINT ["noetl-celery"]']


def test_the_user_owns_noetl_home() -> None:
    final = dockerfile_stages()[-1][1]
    homes = [m.group(1) for i in final if (m := re.match(r"ENV NOETL_HOME=(\S+)", i))]
    assert homes, "NOETL_HOME is set in the runtime stage"
    uid = image_user().partition(":")[0]
    runs = " ".join(i for i in final if i.startswith("RUN "))
    assert re.search(rf"useradd\b[^&]*--uid {uid}\b", runs), "the user exists in /etc/passwd"
    assert re.search(rf"chown {uid}(:\d+)? {re.escape(homes[-1])}\b", runs), (
        f"NOETL_HOME {homes[-1]} is writable by uid {uid}"
    )


# ---- systemd --------------------------------------------------------------------------------
def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """A unit file as {section: {key: [values, in order]}} (a key may repeat, as
    EnvironmentFile does); any line that is not a section, a key=value, a comment or
    blank fails."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for number, raw in enumerate((SYSTEMD / name).read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        assert sep and current is not None and re.fullmatch(r"[A-Za-z]+", key), (
            f"{name}:{number}: not a key=value in a section: {raw!r}"
        )
        current.setdefault(key, []).append(value.strip())
    return sections


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(s|min)?", value)
    assert match, f"a duration in seconds or minutes: {value!r}"
    return int(match[1]) * (60 if match[2] == "min" else 1)


@pytest.mark.parametrize("name", UNITS)
def test_a_systemd_unit_runs_a_noetl_celery_command_as_noetl(name: str) -> None:
    sections = unit(name)
    assert {"Unit", "Service", "Install"} <= set(sections)
    service = sections["Service"]
    assert service["User"] == ["noetl"]
    assert service["EnvironmentFile"][0] == "/etc/noetl-celery/env"
    assert service["Restart"] == ["on-failure"]
    assert service["KillSignal"] == ["SIGTERM"]
    # a worker's warm shutdown ends before systemd kills what is left
    assert seconds(service["TimeoutStopSec"][0]) > SHUTDOWN_SECONDS
    program, *words = service["ExecStart"][0].split()
    assert program.endswith("/noetl-celery")
    command = name.split("@")[0].split(".")[0].removeprefix("noetl-")
    # $VARIABLES are options of one instance, expanded by systemd
    assert parse([w for w in words if not w.startswith("$")])[0] == command
    assert sections["Install"]["WantedBy"] == ["multi-user.target"]


def test_the_worker_unit_names_each_instance_and_stops_only_its_main_process() -> None:
    service = unit("noetl-worker@.service")["Service"]
    words = service["ExecStart"][0].split()
    assert words[words.index("-n") + 1] == "%i@%H"  # instance @ host: unique per machine
    # SIGTERM to the main process only (Celery's warm shutdown, which ends its children)
    assert service["KillMode"] == ["mixed"]


def test_the_serve_unit_binds_all_interfaces() -> None:
    words = unit("noetl-serve.service")["Service"]["ExecStart"][0].split()
    _, options = parse(words[1:])
    assert options["host"] == "0.0.0.0"  # serve refuses it without credentials: the env file


def test_the_environment_example_names_the_settings_the_units_need() -> None:
    keys = {
        line.partition("=")[0]
        for line in (SYSTEMD / "env.example").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {"NOETL_DATABASE_URL", "NOETL_BROKER_URL", "NOETL_CREDENTIALS_FILE"} <= keys
    assert "NOETL_API_TOKEN" in keys  # serve binds 0.0.0.0


# ---- docker compose -------------------------------------------------------------------------
def test_compose_scales_workers() -> None:
    """`docker compose up --scale worker=4`: nothing fixed per container on the worker,
    and each names itself after its container."""
    worker = services()["worker"]
    assert "container_name" not in worker and "ports" not in worker and "hostname" not in worker
    words = worker["command"]
    assert parse(words)[0] == "worker"
    assert words[words.index("-n") + 1] == "worker@%h"
    assert worker["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert seconds(worker["stop_grace_period"]) > SHUTDOWN_SECONDS


def test_compose_migrates_once_before_the_engine_starts() -> None:
    svc = services()
    assert parse(svc["migrate"]["command"])[0] == "db upgrade"
    dependents = {name for name, s in svc.items() if "migrate" in (s.get("depends_on") or {})}
    assert {"worker", "beat", "flower", "api"} <= dependents


# ---- Kubernetes -----------------------------------------------------------------------------
def manifests() -> list[tuple[str, dict[str, Any]]]:
    found = [
        (path.name, doc)
        for path in sorted(KUBERNETES.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc is not None
    ]
    assert found, f"no manifests in {KUBERNETES}"
    return found


def by_name(kind: str, name: str) -> dict[str, Any]:
    matches = [d for _, d in manifests() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"one {kind} {name}, found {len(matches)}"
    return matches[0]


def pod_of(doc: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = doc["spec"]["template"]["spec"]
    return pod


def container(doc: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod_of(doc)["containers"]
    return dict(only)


@pytest.mark.parametrize("doc", [d for _, d in manifests()], ids=[f for f, _ in manifests()])
def test_a_manifest_is_valid_for_kubernetes(doc: dict[str, Any]) -> None:
    assert doc.get("apiVersion") and doc.get("kind") and doc.get("metadata", {}).get("name")
    # strict: an unknown field (a typo) fails as well as a wrong type or a missing one
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_validator_catches_a_typo() -> None:
    """The check above can fail: a misspelt field of a real manifest is refused."""
    doc = by_name("Deployment", "noetl-worker")
    container_spec = pod_of(doc)["containers"][0]
    container_spec["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


WORKLOADS = {
    ("Deployment", "noetl-worker"): "worker",
    ("Deployment", "noetl-beat"): "beat",
    ("Deployment", "noetl-serve"): "serve",
    ("Deployment", "noetl-flower"): "flower",
    ("Job", "noetl-db-upgrade"): "db upgrade",
}


@pytest.mark.parametrize(("key", "command"), list(WORKLOADS.items()), ids=list(WORKLOADS.values()))
def test_a_workload_runs_a_noetl_celery_command_in_the_image_as_non_root(
    key: tuple[str, str], command: str
) -> None:
    doc = by_name(*key)
    spec = container(doc)
    assert "command" not in spec, "the image's ENTRYPOINT (noetl-celery) runs the args"
    assert re.fullmatch(r"[\w./-]+/noetl-celery:[\w.-]+", spec["image"]), spec["image"]
    assert parse(list(spec["args"]))[0] == command
    security = pod_of(doc)["securityContext"]
    assert security["runAsNonRoot"] is True
    assert str(security["runAsUser"]) == image_user().partition(":")[0]
    assert spec["securityContext"]["allowPrivilegeEscalation"] is False
    sources = [s["secretRef"]["name"] for s in spec.get("envFrom", [])]
    assert sources == [by_name("Secret", "noetl-celery")["metadata"]["name"]]


def test_the_secret_example_holds_what_the_engine_reads() -> None:
    secret = by_name("Secret", "noetl-celery")["stringData"]
    assert {"NOETL_DATABASE_URL", "NOETL_BROKER_URL", "credentials.json"} <= set(secret)
    assert secret["NOETL_DATABASE_URL"].startswith("postgresql://")
    yaml.safe_load(secret["credentials.json"])  # JSON is YAML: it parses


def test_workers_stop_within_the_grace_period_and_name_themselves() -> None:
    doc = by_name("Deployment", "noetl-worker")
    pod, spec = pod_of(doc), container(doc)
    env = {e["name"]: e for e in spec["env"]}
    shutdown = float(env["NOETL_WORKER_SHUTDOWN_SECONDS"]["value"])
    assert shutdown == 20 and pod["terminationGracePeriodSeconds"] == 30
    args = spec["args"]
    name = args[args.index("-n") + 1]
    # $(VAR) is expanded by Kubernetes only for a variable the container defines
    variable = re.fullmatch(r"worker@\$\((\w+)\)", name)
    assert variable, name
    assert env[variable[1]]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    mounted = {m["mountPath"] for m in spec["volumeMounts"]}
    assert Path(env["NOETL_CREDENTIALS_FILE"]["value"]).parent.as_posix() in mounted


def test_beat_is_one_replica() -> None:
    assert by_name("Deployment", "noetl-beat")["spec"]["replicas"] == 1


def test_serve_probes_liveness_and_readiness_routes() -> None:
    doc = by_name("Deployment", "noetl-serve")
    spec = container(doc)
    routes = {route.path for route in _serve_routes()}
    probes = {kind: spec[kind]["httpGet"]["path"] for kind in ("livenessProbe", "readinessProbe")}
    assert probes == {"livenessProbe": "/api/health", "readinessProbe": "/api/ready"}
    assert set(probes.values()) <= routes
    # the probes pass serve's Host check whatever NOETL_API_ALLOWED_HOSTS says
    for kind in probes:
        headers = {h["name"]: h["value"] for h in spec[kind]["httpGet"]["httpHeaders"]}
        assert headers["Host"] == "localhost"
    _, options = parse(list(spec["args"]))
    assert {p["containerPort"] for p in spec["ports"]} == {options["port"]}


def _serve_routes() -> list[Any]:
    import types

    from fastapi.routing import iter_route_contexts

    from noetl_celery.web.app import create_app

    app = create_app(types.SimpleNamespace(), Settings())  # type: ignore[arg-type]
    return list(iter_route_contexts(app.routes))


def test_the_readiness_route_is_open_to_probes() -> None:
    from noetl_celery.web.auth import OPEN_PATHS

    assert {"/api/health", "/api/ready"} <= OPEN_PATHS


def test_the_guide_names_only_files_that_exist_and_shows_the_manifests() -> None:
    guide = (ROOT / "docs" / "operations" / "deployment.md").read_text()
    named = set(re.findall(r"deploy/[\w@./-]+\.(?:yaml|service|example)", guide))
    assert {p for p in named if not (ROOT / p).is_file()} == set()
    included = set(re.findall(r'^--8<-- "([^"]+)"$', guide, re.M))
    assert {"deploy/kubernetes/worker.yaml", "deploy/kubernetes/serve.yaml"} <= included
    assert "--scale worker=4" in guide and "/api/ready" in guide
