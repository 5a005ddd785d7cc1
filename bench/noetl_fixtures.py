"""Measure how many of NoETL's own fixture playbooks this engine runs, unchanged.

    python -m bench.noetl_fixtures --noetl-repo /work/.mirror/noetl+noetl/repo --commit 832c9a1e
    python -m bench.noetl_fixtures ... --template-mode noetl --only pagination
    python -m bench.noetl_fixtures --noetl-repo /work/.mirror/noetl+e2e/repo --commit 1e41859c

The playbooks are read from the NoETL git checkout at run time (`git show`) into a
temporary directory; nothing of NoETL's is copied into this project. Every `.yaml` under
tests/fixtures/playbooks is validated in-process; the *self-contained* ones (tool kinds
this engine runs, http only to 127.0.0.1/localhost or to the compat kit's test API server)
are registered and run embedded (SQLite, in-process workers) with a timeout. The test API
server's in-cluster address (`paginated-api.test-server...:5555`) is rewritten in the
temporary copy to the server the compat kit starts; credentials come from the kit
(`pg_k8s`, `pg_local` on a scratch Postgres database).

The e2e repository's layout (noetl/e2e: `fixtures/`, found by itself or `--layout e2e`)
is read the same way, every `.yaml` under `fixtures/`: documents that are not DSL v2
playbooks (test configuration, `Subscription` resources) are SKIPPED naming what they
are; playbooks that need a cloud or external service are NEEDS naming it
(bench.fixture_services); every other playbook runs, whatever its tool kinds (a kind this
engine lacks fails naming it), with the in-cluster Postgres rewritten to the local one,
each by itself except sub-playbooks of another fixture (CHILD: run by their parent, whose
status they show); e2e's setup tasks (`setup_tasks` of its playbook_test_config.yaml)
run first. Fixtures meant to fail, or needing state outside this machine, or whose
checks fail on NoETL too, are judged by bench.fixture_intents (each entry with evidence).
The test API server is the checkout's own (`fixtures/servers/paginated_api.py`, started
from the temporary copy; `--api-server kit` for the compat kit's).

One line per playbook: COMPLETED, FAILED (the error's first line), FAILED-AS-MEANT,
FAILED-BY-CHANCE, LONG (--skip-long) and
UPSTREAM (fixture_intents), REFUSED (a validation problem), TIMEOUT, CHILD (a sub-playbook
of a selected one: registered, run by its parent),
NEEDS (e2e: the services it needs, and VALID/REFUSED from validation) or SKIPPED (not
self-contained or not a playbook: the reason, and VALID/REFUSED); totals last.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from bench import fixture_intents, fixture_services
from bench.harness import COMPAT_KIT, env_for, python
from noetl_celery.constants import UNSUPPORTED_NOETL_KINDS

FIXTURES = "tests/fixtures/playbooks"
E2E_FIXTURES = "fixtures"
RUNNABLE_KINDS = frozenset({"python", "postgres", "duckdb", "noop", "workbook", "playbook", "http"})
TEST_SERVER = "http://paginated-api.test-server.svc.cluster.local:5555"
LOCAL_HOSTS = ("127.0.0.1", "localhost", "paginated-api.test-server.svc.cluster.local")
# with --noetl-kinds, fixtures with steps of NoETL kinds this engine lacks run too (they
# should run until such a step and fail naming it)
NOETL_ONLY_KINDS = set(UNSUPPORTED_NOETL_KINDS)
URL = re.compile(r"https?://([A-Za-z0-9_.-]+)")
# credential names the fixtures give postgres steps (`auth: pg_k8s`, `pg_auth: pg_local`,
# the literal `pg_auth`): all of them point at the scratch database
PG_NAME = re.compile(r"\b(pg_\w+|postgres_\w+|\w+_postgres|noetl_connection)\b")


@dataclass
class Fixture:
    path: str  # relative to the fixtures directory
    text: str
    data: Any = None
    kinds: set[str] = field(default_factory=set)
    children: set[str] = field(default_factory=set)  # catalog paths of `kind: playbook`
    catalog_path: str | None = None
    skip: str | None = None  # why it is not self-contained
    needs: list[str] = field(default_factory=list)  # e2e: the services it needs
    problems: list[str] = field(default_factory=list)  # validation errors
    warnings: int = 0
    status: str = ""
    detail: str = ""
    seconds: float = 0.0


def load_kit(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("compat_run", path)
    if not path.is_file() or spec is None or spec.loader is None:
        raise SystemExit(f"compat kit not found at {path}; pass --compat-kit")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fixture_names(repo: str, commit: str, fixtures: str = FIXTURES) -> list[str]:
    return subprocess.run(
        ["git", "-C", repo, "ls-tree", "-r", "--name-only", commit, fixtures],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()


def detect_layout(repo: str, commit: str) -> str:
    """`noetl` (NoETL's monorepo: tests/fixtures/playbooks) or `e2e` (noetl/e2e: fixtures/)."""
    return "noetl" if fixture_names(repo, commit, FIXTURES) else "e2e"


def write_support_files(repo: str, commit: str, root: Path, fixtures: str = FIXTURES) -> int:
    """The fixtures' other files (the scripts `script:` names) at their repository paths
    under `root`: NoETL resolves `script.uri` against its working directory, the
    repository's root, and the runs here start there too."""
    count = 0
    for name in fixture_names(repo, commit, fixtures):
        if name.endswith((".yaml", ".yml")):
            continue
        blob = subprocess.run(
            ["git", "-C", repo, "show", f"{commit}:{name}"], check=True, capture_output=True
        ).stdout
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob)
        count += 1
    return count


def read_fixtures(
    repo: str, commit: str, only: str | None, fixtures: str = FIXTURES
) -> list[Fixture]:
    out = []
    for name in fixture_names(repo, commit, fixtures):
        if not name.endswith((".yaml", ".yml")) or (only and only not in name):
            continue
        text = subprocess.run(
            ["git", "-C", repo, "show", f"{commit}:{name}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        out.append(Fixture(name[len(fixtures) + 1 :], text))
    return out


def walk_tools(node: Any) -> list[dict[str, Any]]:
    """Every mapping with a string `kind` under a `tool`/`workbook` entry (tasks included)."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if isinstance(node.get("kind"), str):
            found.append(node)
        for key, value in node.items():
            if key in ("auth", "credential", "credentials", "keychain", "spec", "cursor"):
                continue  # `kind` there is an auth type or a cursor driver, not a tool
            found.extend(walk_tools(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(walk_tools(item))
    return found


def classify(fx: Fixture, noetl_kinds: bool = False) -> None:
    try:
        fx.data = yaml.safe_load(fx.text)
    except yaml.YAMLError as exc:
        fx.skip = f"not YAML: {str(exc).splitlines()[0]}"
        return
    if not isinstance(fx.data, dict) or "workflow" not in fx.data:
        fx.skip = "not a playbook (no workflow)"
        return
    meta = fx.data.get("metadata")
    fx.catalog_path = meta.get("path") if isinstance(meta, dict) else None
    for tool in walk_tools(fx.data.get("workflow")) + walk_tools(fx.data.get("workbook")):
        fx.kinds.add(tool["kind"])
        if tool["kind"] == "playbook" and isinstance(tool.get("path"), str):
            fx.children.add(tool["path"])
    foreign = sorted(fx.kinds - RUNNABLE_KINDS - (NOETL_ONLY_KINDS if noetl_kinds else set()))
    hosts = sorted({h for h in URL.findall(fx.text) if h not in LOCAL_HOSTS})
    if foreign:
        fx.skip = f"kinds {', '.join(foreign)}"
    elif hosts:
        fx.skip = f"external hosts {', '.join(hosts[:3])}"


def classify_e2e(fx: Fixture) -> None:
    """e2e layout: SKIPPED (not a playbook, `skip` says what it is), NEEDS (`needs` names
    the services) or self-contained, whatever its tool kinds."""
    try:
        fx.data = yaml.safe_load(fx.text)
    except yaml.YAMLError as exc:
        fx.skip = f"not YAML: {str(exc).splitlines()[0]}"
        return
    fx.skip = fixture_services.document_kind(fx.data)
    if fx.skip is not None:
        return
    meta = fx.data.get("metadata")
    fx.catalog_path = meta.get("path") if isinstance(meta, dict) else None
    for tool in walk_tools(fx.data.get("workflow")) + walk_tools(fx.data.get("workbook")):
        fx.kinds.add(tool["kind"])
        if tool["kind"] == "playbook" and isinstance(tool.get("path"), str):
            fx.children.add(workload_value(fx.data, tool["path"]))
    fx.needs = fixture_services.services(fx.data)
    outside = fixture_intents.needs(fx.path)
    if outside is not None:
        fx.needs = sorted({*fx.needs, outside})


TEST_CONFIG = "fixtures/playbook_test_config.yaml"


def setup_playbooks(repo: str, commit: str) -> set[str]:
    """Fixture paths (relative to `fixtures/`) of e2e's setup tasks."""
    shown = subprocess.run(
        ["git", "-C", repo, "show", f"{commit}:{TEST_CONFIG}"], capture_output=True, text=True
    )
    config = yaml.safe_load(shown.stdout) if shown.returncode == 0 else None
    tasks = config.get("setup_tasks") if isinstance(config, dict) else None
    found = set()
    for task in (tasks or {}).values():
        playbook = task.get("playbook") if isinstance(task, dict) else None
        if isinstance(playbook, str) and playbook.startswith(f"{E2E_FIXTURES}/"):
            found.add(playbook[len(E2E_FIXTURES) + 1 :] + ".yaml")
    return found


WORKLOAD_NAME = re.compile(r"^\{\{\s*(?:workload\.)?([A-Za-z_]\w*)\s*\}\}$")


def workload_value(data: dict[str, Any], text: str) -> str:
    """`{{ chunk_worker_path }}` / `{{ workload.x }}`: the workload's value, if a string."""
    found = WORKLOAD_NAME.match(text.strip())
    workload = data.get("workload")
    if found and isinstance(workload, dict) and isinstance(workload.get(found[1]), str):
        return str(workload[found[1]])
    return text


def validate(fx: Fixture) -> None:
    from noetl_celery.models.validation import validate_text

    report = validate_text(fx.text, fx.path)
    fx.problems = [str(p) for p in report.errors]
    fx.warnings = len(report.warnings)


def first_line(text: Any) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[0][:240] if lines else ""


def run_one(fx: Fixture, file: Path, env: dict[str, str], timeout: float, cwd: Path) -> None:
    cmd = [python(), "-m", "noetl_celery.cli.main", "run", str(file), "--json"]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        fx.status, fx.seconds = "TIMEOUT", time.monotonic() - t0
        return
    fx.seconds = time.monotonic() - t0
    try:
        out = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else None
    except ValueError:
        out = None
    if not isinstance(out, dict):
        fx.status, fx.detail = "FAILED", f"no JSON (exit {proc.returncode}): {first_line(stderr)}"
        return
    status = out.get("status")
    if status == "COMPLETED":
        fx.status = "COMPLETED"
    elif proc.returncode == 2:
        fx.status, fx.detail = "REFUSED", first_line(out.get("error"))
    else:
        fx.status, fx.detail = "FAILED", first_line(out.get("error") or stderr)


def load_fixtures(args: argparse.Namespace) -> tuple[str, str, list[Fixture]]:
    """(layout, fixtures directory, the fixtures read, classified and validated)."""
    layout = args.layout
    if layout == "auto":
        layout = detect_layout(args.noetl_repo, args.commit)
    fixtures_dir = args.fixtures_dir or (E2E_FIXTURES if layout == "e2e" else FIXTURES)
    fixtures = read_fixtures(args.noetl_repo, args.commit, args.only, fixtures_dir)
    for fx in fixtures:
        if layout == "e2e":
            classify_e2e(fx)
            if fx.skip is None:
                validate(fx)
        else:
            classify(fx, args.noetl_kinds)
            validate(fx)
    targets = {p for fx in fixtures for p in fixture_services.subscription_targets(fx.data)}
    for fx in fixtures:  # handlers: their input is a message the server delivers
        if fx.skip is None and fx.catalog_path in targets:
            fx.needs = sorted({*fx.needs, fixture_services.SUBSCRIPTION_SERVICE})
    inherit_needs(fixtures)
    return layout, fixtures_dir, fixtures


# a playbook that runs more children than this is a suite (master_regression_test runs
# every fixture), not the parent of a worker playbook: its children stand alone
SUITE_CHILDREN = 5


def inherit_needs(fixtures: list[Fixture]) -> None:
    """A playbook that runs a child (`kind: playbook`) needs what that child needs."""
    by_path = {fx.catalog_path: fx for fx in fixtures if fx.catalog_path}
    changed = True
    while changed:
        changed = False
        for fx in fixtures:
            inherited = {
                service
                for path in fx.children
                if path in by_path and path != fx.catalog_path
                for service in by_path[path].needs
            }
            if fx.skip is None and not inherited <= set(fx.needs):
                fx.needs = sorted({*fx.needs, *inherited})
                changed = True


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.noetl_fixtures", description=__doc__)
    ap.add_argument("--noetl-repo", required=True, help="a NoETL git checkout (bare is fine)")
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument(
        "--layout",
        choices=("auto", "noetl", "e2e"),
        default="auto",
        help="noetl: tests/fixtures/playbooks; e2e: noetl/e2e's fixtures/; auto: whichever",
    )
    ap.add_argument("--fixtures-dir", help="the fixtures directory (default: the layout's)")
    ap.add_argument(
        "--timeout",
        type=float,
        help="seconds per playbook run (default 90; e2e: 300, its playbook_test_config's "
        "default_timeout)",
    )
    ap.add_argument("--template-mode", choices=("strict", "noetl"), default="strict")
    ap.add_argument(
        "--noetl-kinds",
        action="store_true",
        help="also run fixtures with steps of NoETL kinds this engine lacks",
    )
    ap.add_argument("--only", help="only fixtures whose path contains this text")
    ap.add_argument(
        "--skip-long",
        action="store_true",
        help="do not run the load tests fixture_intents marks long (reported LONG)",
    )
    ap.add_argument(
        "--data-db",
        default="noetl_fixtures_bench_data",
        help="scratch Postgres database for the fixtures' own tables",
    )
    ap.add_argument(
        "--compat-kit",
        type=Path,
        default=COMPAT_KIT,
        help="the compat kit's run.py (its test API server and credentials)",
    )
    ap.add_argument(
        "--api-server",
        choices=("auto", "kit", "checkout"),
        default="auto",
        help="the test API server: the compat kit's, or the checkout's own "
        f"({fixture_services.CHECKOUT_API_SERVER}); auto: the checkout's when it has one",
    )
    ap.add_argument("--json-report", help="also write every result as JSON to this file")
    args = ap.parse_args(argv)

    kit = load_kit(args.compat_kit)
    layout, fixtures_dir, fixtures = load_fixtures(args)
    if args.timeout is None:
        args.timeout = 300.0 if layout == "e2e" else 90.0
    selected = [fx for fx in fixtures if fx.skip is None and not fx.needs]
    # e2e's setup tasks (playbook_test_config.yaml `setup_tasks`, e.g. create_tables for
    # the save tests) run first, by themselves, as its regression does
    setups = setup_playbooks(args.noetl_repo, args.commit) if layout == "e2e" else set()
    selected.sort(key=lambda fx: fx.path not in setups)
    wanted_children = {
        c
        for fx in selected
        if len(fx.children) <= SUITE_CHILDREN
        for c in fx.children
        if c != fx.catalog_path
    } - {fx.catalog_path for fx in selected if fx.path in setups}

    work = Path(tempfile.mkdtemp(prefix="noetl-fixtures-"))
    db = kit.Database(f"postgresql://postgres@127.0.0.1:5432/{args.data_db}")
    db.ensure(fresh=True)
    creds = work / "credentials.json"
    entry = next(iter(db.credentials().values()))
    names = {n for fx in selected for n in PG_NAME.findall(fx.text)} | set(kit.PG_ALIASES)
    names |= {n for fx in selected for n in fixture_services.local_credentials(fx.data)}
    creds.write_text(json.dumps({n: entry for n in sorted(names)}), encoding="utf-8")
    # a NoETL checkout's layout: the playbooks and their scripts at their repository
    # paths, the runs started from its root
    root = work / "repo"
    files = root / fixtures_dir
    write_support_files(args.noetl_repo, args.commit, root, fixtures_dir)
    own_server = root / fixture_services.CHECKOUT_API_SERVER
    if args.api_server == "checkout" or (args.api_server == "auto" and own_server.is_file()):
        server: Any = fixture_services.CheckoutApiServer(own_server, work / "api-server.log")
    else:
        server = kit.ApiServer("127.0.0.1")
    server.start()
    try:
        for fx in selected:
            target = files / fx.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(fixture_services.rewrite(fx.text, server.url), encoding="utf-8")
        env = env_for(
            NOETL_HOME=str(work / "home"),
            NOETL_CREDENTIALS_FILE=str(creds),
            NOETL_TEMPLATE_MODE=args.template_mode,
        )
        print(
            f"fixtures {commit_id(args.noetl_repo, args.commit)} ({layout} layout, "
            f"{fixtures_dir}): "
            f"{len(fixtures)} files, {len(selected)} self-contained; "
            f"template mode {args.template_mode}; test API server {type(server).__name__} "
            f"{server.url}; work dir {work}",
            flush=True,
        )
        if selected:
            register = [python(), "-m", "noetl_celery.cli.main", "catalog", "register", str(files)]
            subprocess.run(register, env=env, cwd=root, capture_output=True, timeout=600)
        run_selected(selected, wanted_children, files, env, args.timeout, root, args.skip_long)
    finally:
        server.stop()
        db.close()
    for fx in fixtures:
        if fx.needs:
            fx.status = "NEEDS"
            fx.detail = f"{', '.join(fx.needs)}; " + (
                "REFUSED: " + first_line(fx.problems[0]) if fx.problems else "VALID"
            )
            report_line(fx)
    for fx in fixtures:
        if fx.skip is not None:
            fx.status = "SKIPPED"
            fx.detail = f"{fx.skip}; " + (
                "REFUSED: " + first_line(fx.problems[0]) if fx.problems else "VALID"
            )
            report_line(fx)
    totals(fixtures)
    if args.json_report:
        rows = [
            {
                k: getattr(fx, k)
                for k in ("path", "status", "detail", "needs", "seconds", "warnings")
            }
            for fx in fixtures
        ]
        Path(args.json_report).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


def run_selected(
    selected: list[Fixture],
    wanted_children: set[str],
    files: Path,
    env: dict[str, str],
    timeout: float,
    root: Path,
    skip_long: bool = False,
) -> None:
    for fx in selected:
        if fx.catalog_path in wanted_children and not fx.problems:
            fx.status = "CHILD"  # alone it reads tables its parent creates
            continue
        if skip_long and fixture_intents.is_long(fx.path):
            fx.status, fx.detail = "LONG", "a load test, not run (--skip-long)"
            report_line(fx)
            continue
        if fx.problems:
            fx.status, fx.detail = "REFUSED", first_line(fx.problems[0])
        else:
            run_one(fx, files / fx.path, env, fixture_intents.timeout(fx.path, timeout), root)
        fx.status, fx.detail = fixture_intents.judge(fx.path, fx.status, fx.detail)
        report_line(fx)
    for fx in selected:
        if fx.status == "CHILD":
            parents = [p for p in selected if fx.catalog_path in p.children and p is not fx]
            fx.detail = "run by " + ", ".join(f"{p.path} ({p.status})" for p in parents)
            report_line(fx)


def commit_id(repo: str, commit: str) -> str:
    return subprocess.run(
        ["git", "-C", repo, "rev-parse", "--short=12", f"{commit}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def report_line(fx: Fixture) -> None:
    extra = f" ({fx.seconds:.1f}s)" if fx.seconds else ""
    detail = f": {fx.detail}" if fx.detail else ""
    print(f"{fx.status:<9} {fx.path}{extra}{detail}", flush=True)


def totals(fixtures: list[Fixture]) -> None:
    counts = Counter(fx.status for fx in fixtures)
    ran_as = (
        "COMPLETED",
        "FAILED-AS-MEANT",
        "FAILED-BY-CHANCE",
        "UPSTREAM",
        "FAILED",
        "TIMEOUT",
        "REFUSED",
    )
    ran = sum(counts[s] for s in ran_as)
    skipped = [fx for fx in fixtures if fx.status == "SKIPPED"]
    refused_skipped = sum(1 for fx in skipped if fx.problems)
    print(
        f"totals: {counts['COMPLETED']} COMPLETED, {counts['FAILED-AS-MEANT']} "
        f"FAILED-AS-MEANT, {counts['FAILED-BY-CHANCE']} FAILED-BY-CHANCE, "
        f"{counts['UPSTREAM']} UPSTREAM, {counts['FAILED']} FAILED, "
        f"{counts['REFUSED']} REFUSED, {counts['TIMEOUT']} TIMEOUT of {ran} self-contained run; "
        f"{counts['CHILD']} CHILD; {counts['NEEDS']} NEEDS a service; "
        f"{len(skipped)} SKIPPED ({refused_skipped} of them REFUSED "
        f"by validation); all files: {sum(1 for fx in fixtures if not fx.problems)} valid, "
        f"{sum(1 for fx in fixtures if fx.problems)} refused",
        flush=True,
    )
    needs = [fx for fx in fixtures if fx.status == "NEEDS"]
    if needs:
        by_service = Counter(service for fx in needs for service in fx.needs)
        print(
            f"needs a service: {len(needs)} playbooks; by service (a playbook counts under "
            f"each it needs): " + ", ".join(f"{s} {n}" for s, n in sorted(by_service.items())),
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
