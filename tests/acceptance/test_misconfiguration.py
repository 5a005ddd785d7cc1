"""Fail fast on misconfiguration: one line naming the (masked) database and what to do,
exit 2, no traceback, and nothing created on the way (subprocesses, real Postgres)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from noetl_celery.errors import ConfigurationError
from noetl_celery.settings import Settings
from noetl_celery.store.schema import SCHEMA_REVISION
from tests.conftest import _env
from tests.support import services
from tests.support.workers import run_cli

ROOT = Path(__file__).resolve().parents[2]
HELLO = str(ROOT / "playbooks" / "examples" / "hello_world.yaml")
pytestmark = pytest.mark.acceptance

BROKER_SQLITE = (
    "NOETL_BROKER_URL is set but NOETL_DATABASE_URL is not: workers cannot share the "
    "embedded SQLite file; set NOETL_DATABASE_URL=postgresql://..."
)
# every command that uses the engine database, with arguments that get it that far
EVERY_COMMAND: dict[str, list[str]] = {
    "run": ["run", HELLO],
    "run --json": ["run", HELLO, "--json"],
    "worker": ["worker"],
    "beat": ["beat"],
    "cancel": ["cancel", "123"],
    "schedule add": ["schedule", "add", HELLO, "--cron", "0 6 * * *"],
    "schedule list": ["schedule", "list"],
    "catalog register": ["catalog", "register", HELLO],
    "status": ["status", "123"],
    "events": ["events", "123"],
    "executions": ["executions"],
    "db upgrade": ["db", "upgrade"],
}
# every command but `db upgrade` (which migrates what it is pointed at) refuses a broker
# with the embedded database: a read there would show an unrelated, empty history
WRITERS = [
    "run",
    "run --json",
    "worker",
    "beat",
    "cancel",
    "schedule add",
    "schedule list",
    "status",
    "events",
    "executions",
    "catalog register",
]


def secret_url(dbname: str, host: str = "", port: int = 0, query: str = "") -> tuple[str, str]:
    """A postgresql:// URL with a password in it (trust auth accepts any), and that
    password: no output may contain it."""
    params = conninfo_to_dict(services.ADMIN_DSN)
    password = str(params.get("password") or f"canary-{uuid.uuid4().hex[:8]}")
    host = host or str(params.get("host") or "127.0.0.1")
    port = port or int(str(params.get("port") or 5432))
    user = params.get("user", "postgres")
    return f"postgresql://{user}:{password}@{host}:{port}/{dbname}{query}", password


def masked(url: str, password: str) -> str:
    return url.replace(f":{password}@", ":***@")


def one_line_error(proc: subprocess.CompletedProcess[str], json_out: bool = False) -> str:
    """The command failed with exit 2 and said why in one line, without a traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    if json_out:
        lines = proc.stdout.strip().splitlines()
        assert len(lines) == 1, proc.stdout
        out = json.loads(lines[0])
        assert out["status"] == "FAILED" and out["execution_id"] is None
        return str(out["error"])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0].removeprefix("Error: ")


def public_tables(dbname: str) -> list[str]:
    with psycopg.connect(services.dsn_for(dbname), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
        ).fetchall()
    return [r[0] for r in rows]


@pytest.fixture
def empty_db() -> Iterator[str]:
    name = f"noetl_h1_empty_{uuid.uuid4().hex[:10]}"
    services.create_database(name)
    try:
        yield name
    finally:
        services.drop_database(name)


# ---- a broker needs Postgres -------------------------------------------------------------
@pytest.mark.parametrize("name", WRITERS)
def test_a_broker_with_the_embedded_database_is_refused(
    name: str, tmp_path: Path, redis_url: str
) -> None:
    home = tmp_path / "home"
    env = _env(NOETL_HOME=str(home), NOETL_BROKER_URL=redis_url)
    proc = run_cli(EVERY_COMMAND[name], env, timeout=60)
    assert one_line_error(proc, json_out=name == "run --json") == BROKER_SQLITE
    assert not home.exists()  # no embedded database was made for it


def test_the_python_client_refuses_a_broker_with_the_embedded_database(
    tmp_path: Path, redis_url: str
) -> None:
    import noetl_celery

    with pytest.raises(ConfigurationError) as info:
        noetl_celery.Client(Settings(home=tmp_path / "home", broker_url=redis_url))
    assert str(info.value) == BROKER_SQLITE
    assert not (tmp_path / "home").exists()


# ---- who may create tables --------------------------------------------------------------
def test_nothing_but_db_upgrade_creates_tables_in_postgres(empty_db: str, redis_url: str) -> None:
    url, password = secret_url(empty_db)
    env = _env(NOETL_DATABASE_URL=url, NOETL_BROKER_URL=redis_url)
    expected = (
        f"the engine database {masked(url, password)} has no engine tables, this "
        f"noetl-celery needs {SCHEMA_REVISION}: run `noetl-celery db upgrade`"
    )
    for name, args in EVERY_COMMAND.items():
        if name == "db upgrade":
            continue
        proc = run_cli(args, env, timeout=60)
        assert one_line_error(proc, json_out=name == "run --json") == expected, name
        assert password not in proc.stdout + proc.stderr
        assert public_tables(empty_db) == [], f"{name} created tables"
    proc = run_cli(["db", "upgrade", "--json"], env)
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"revision": SCHEMA_REVISION}
    assert "executions" in public_tables(empty_db)


def test_the_python_client_refuses_a_database_without_engine_tables(empty_db: str) -> None:
    import noetl_celery
    from noetl_celery.errors import SchemaOutdated

    url, password = secret_url(empty_db)
    with pytest.raises(SchemaOutdated) as info:
        noetl_celery.Client(Settings(database_url=url))
    assert str(info.value).startswith(f"the engine database {masked(url, password)} has no ")
    assert public_tables(empty_db) == []


def test_a_database_at_an_older_revision_is_refused_until_upgraded(
    empty_db: str, redis_url: str, tmp_path: Path
) -> None:
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine

    from noetl_celery.store.migrate import script_location

    url, password = secret_url(empty_db)
    engine = create_engine(services.sqlalchemy_url(empty_db))
    with engine.begin() as conn:  # what a previous noetl-celery left behind
        config = Config()
        config.set_main_option("script_location", str(script_location()))
        config.attributes["connection"] = conn
        command.upgrade(config, "0005")
    engine.dispose()
    env = _env(NOETL_DATABASE_URL=url, NOETL_BROKER_URL=redis_url, NOETL_HOME=str(tmp_path))
    expected = (
        f"the engine database {masked(url, password)} is at revision 0005, this noetl-celery "
        f"needs {SCHEMA_REVISION}: run `noetl-celery db upgrade`"
    )
    for name in ("worker", "beat", "run", "catalog register", "executions"):
        proc = run_cli(EVERY_COMMAND[name], env, timeout=60)
        assert one_line_error(proc) == expected, name
    with psycopg.connect(services.dsn_for(empty_db)) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("0005",)
        assert "engine_info" not in public_tables(empty_db)
    upgraded = run_cli(["db", "upgrade"], env)
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"at revision {SCHEMA_REVISION}" in upgraded.stdout
    assert run_cli(["executions", "--json"], env).stdout.strip() == "[]"


def test_reads_never_create_the_embedded_database(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(NOETL_HOME=str(home))
    listed = run_cli(["executions", "--json"], env)
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    for args in (["status", "123"], ["events", "123"], ["logs", "123"], ["watch", "123"]):
        proc = run_cli(args, env)
        assert proc.returncode == 2 and "no execution with id 123" in proc.stderr
        assert "Traceback" not in proc.stderr
    for args in (["catalog", "list", "--json"], ["schedule", "list", "--json"]):
        proc = run_cli(args, env)
        assert proc.returncode == 0 and json.loads(proc.stdout) == [], proc.stderr
    assert run_cli(["validate", HELLO], env).returncode == 0
    assert not home.exists()
    # the first write creates and migrates it
    ran = run_cli(["run", HELLO, "--json"], env)
    assert ran.returncode == 0 and (home / "noetl.sqlite3").is_file()
    assert len(json.loads(run_cli(["executions", "--json"], env).stdout)) == 1


CHECK_IMPORTS = """
import sys
from noetl_celery.cli.common import build_engine
from noetl_celery.engine.bootstrap import Role
from noetl_celery.settings import Settings
engine = build_engine(Settings.from_env(), Role.READER if sys.argv[1] == "read" else Role.EDITOR)
engine.executions()
engine.close()
print("alembic" in sys.modules)
"""


@pytest.mark.parametrize(
    ("embedded", "mode", "imported"),
    [
        (False, "read", False),
        (False, "write", False),
        (True, "read", False),
        # a new embedded database is created at the head revision from the schema
        # (store.migrate.create_at_head): alembic is only for one that must be migrated
        (True, "write", False),
    ],
)
def test_alembic_is_imported_only_to_migrate(
    embedded: bool, mode: str, imported: bool, pg_url: str, tmp_path: Path
) -> None:
    env = _env(NOETL_HOME=str(tmp_path / "home"))
    if not embedded:
        env["NOETL_DATABASE_URL"] = pg_url  # a migrated clone: checked by a plain SELECT
    proc = subprocess.run(
        [sys.executable, "-c", CHECK_IMPORTS, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(imported)


# ---- a database that cannot be used ------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def silent_server() -> Iterator[int]:
    """A loopback port that accepts connections and never answers: a host that does not
    respond, without sending a packet off this machine."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(5)
    for conn in accepted:
        conn.close()
    server.close()


def test_a_refused_connection_is_one_line_for_every_command(redis_url: str) -> None:
    url, password = secret_url("noetl", port=free_port())
    env = _env(NOETL_DATABASE_URL=url, NOETL_BROKER_URL=redis_url)
    expected = (
        f"the engine database {masked(url, password)} cannot be used: Connection refused; "
        "check NOETL_DATABASE_URL (host, port, options) and that Postgres runs there"
    )
    for name, args in EVERY_COMMAND.items():
        proc = run_cli(args, env, timeout=60)
        assert one_line_error(proc, json_out=name == "run --json") == expected, name
        assert password not in proc.stdout + proc.stderr


UNUSABLE = {
    "no answer": ("noetl", "connection timeout expired", "host, port"),
    "missing database": (
        "noetl_h1_no_such_database",
        'database "noetl_h1_no_such_database" does not exist',
        "create the database, then run `noetl-celery db upgrade`",
    ),
    "unknown user": (
        "postgres",
        'role "noetl_h1_no_such_role" does not exist',
        "check the user and password in NOETL_DATABASE_URL",
    ),
    "malformed": ("x", "is not a valid database URL", "expected postgresql://"),
}


@pytest.mark.parametrize("case", sorted(UNUSABLE))
@pytest.mark.parametrize("name", ["executions", "run --json", "worker", "db upgrade"])
def test_an_unusable_database_is_one_line(
    case: str, name: str, silent_server: int, redis_url: str
) -> None:
    dbname, reason, hint = UNUSABLE[case]
    if case == "no answer":  # the URL's connect_timeout wins over the engine's default
        url, password = secret_url(dbname, port=silent_server, query="?connect_timeout=1")
    else:
        url, password = secret_url(dbname)
    if case == "unknown user":
        url = url.replace("://postgres:", "://noetl_h1_no_such_role:", 1)
    if case == "malformed":
        url = url.replace(":5432/", ":notaport/", 1)
    env = _env(NOETL_DATABASE_URL=url, NOETL_BROKER_URL=redis_url)
    message = one_line_error(run_cli(EVERY_COMMAND[name], env, timeout=60), name == "run --json")
    assert masked(url, password) in message and password not in message
    assert reason in message and hint in message
