"""An installed noetl-celery (a built wheel, or `pip install .`) works without the source
tree: the embedded hello_world and `db upgrade` against Postgres, from a fresh venv.

The venv sees the machine's packages (`--system-site-packages`) so only noetl-celery
itself is installed (`--no-deps`): nothing else is downloaded. The package is built from
a copy of the project's files, so no build output lands in the work tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import psycopg
import pytest

import noetl_celery
from noetl_celery.store.schema import SCHEMA_REVISION
from tests.support import services
from tests.support.server import ServeProcess

ROOT = Path(__file__).resolve().parents[2]
HELLO = "playbooks/examples/hello_world.yaml"  # in the repository, not in the package
pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(600)]


def sh(
    cmd: list[str], env: Mapping[str, str], cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        cmd, env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{cmd}: {proc.stdout}\n{proc.stderr}"
    return proc


def clean_env(**values: str) -> dict[str, str]:
    """No NOETL_* and no PYTHONPATH: nothing may point the venv at the source tree."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOETL_") and k != "PYTHONPATH"}
    env.update(values)
    return env


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, copy / name)
    shutil.copytree(
        ROOT / "noetl_celery",
        copy / "noetl_celery",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    return copy


@pytest.fixture
def fresh_db() -> Iterator[str]:
    name = f"noetl_h1_install_{uuid.uuid4().hex[:10]}"
    services.create_database(name)
    try:
        yield name
    finally:
        services.drop_database(name)


@pytest.mark.parametrize("how", ["wheel", "pip install ."])
def test_an_installed_package_runs_hello_world_and_db_upgrade(
    how: str, source_copy: Path, fresh_db: str, tmp_path: Path
) -> None:
    env = clean_env()
    venv = tmp_path / "venv"
    sh([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], env, tmp_path)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps"]
    if how == "wheel":
        wheels = tmp_path / "wheels"
        sh(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), "."],
            env,
            source_copy,
        )
        (wheel,) = wheels.glob("noetl_celery-*.whl")
        sh([*pip, str(wheel)], env, tmp_path)
    else:
        sh([*pip, str(source_copy)], env, tmp_path)

    # the venv's own copy is imported, not the source tree nor another install
    where = sh(
        [str(venv / "bin" / "python"), "-c", "import noetl_celery; print(noetl_celery.__file__)"],
        env,
        tmp_path,
    ).stdout.strip()
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert Path(where).resolve().parent == (site / "noetl_celery").resolve()
    assert (site / "noetl_celery" / "store" / "migrations" / "env.py").is_file()

    cli = str(venv / "bin" / "noetl-celery")
    # run from the repository's root (where hello_world is): the console script still
    # imports the installed package, as --version shows
    version = sh([cli, "--version"], env, ROOT).stdout.strip()
    assert version == f"noetl-celery {noetl_celery.__version__} ({site.resolve() / 'noetl_celery'})"

    home = tmp_path / "home"
    ran = sh([cli, "run", HELLO, "--json"], clean_env(NOETL_HOME=str(home)), ROOT)
    summary = json.loads(ran.stdout)
    assert summary["status"] == "COMPLETED" and summary["result"]["greeted"] == 3
    assert (home / "noetl.sqlite3").is_file()

    url = services.sqlalchemy_url(fresh_db).replace("postgresql+psycopg://", "postgresql://")
    upgraded = sh([cli, "db", "upgrade", "--json"], clean_env(NOETL_DATABASE_URL=url), tmp_path)
    assert json.loads(upgraded.stdout) == {"revision": SCHEMA_REVISION}
    with psycopg.connect(services.dsn_for(fresh_db)) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (
            SCHEMA_REVISION,
        )
        identity = conn.execute("SELECT value FROM engine_info WHERE key = 'database_id'")
        assert identity.fetchone() is not None

    # the pages' templates and scripts are package data: `serve` renders them from the
    # installed copy (embedded, on the same home)
    served = ServeProcess(clean_env(NOETL_HOME=str(home)), program=[cli])
    try:
        served.wait_ready()
        page = httpx.get(f"{served.url}/executions", timeout=10)
        assert page.status_code == 200 and summary["execution_id"] in page.text
        script = httpx.get(f"{served.url}/pages-static/pages.js", timeout=10)
        assert script.status_code == 200 and script.text.strip()
        api = httpx.get(f"{served.url}/api/v1/executions/{summary['execution_id']}", timeout=10)
        assert api.json()["status"] == "COMPLETED"
    finally:
        served.stop()
