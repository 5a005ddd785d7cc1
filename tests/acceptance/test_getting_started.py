"""The quick start of docs/getting-started.md ("Embedded, then distributed") runs as
written, from the first command to the last, in bash on a fresh directory: the embedded
run, `createdb`, `db upgrade`, the credentials file copied from the sample, a worker in
the background, hello_world on it, the example API and api_to_postgres through the
credential the worker reads.

Only what must differ on a shared test machine is changed, each by an exact replacement
that must find its text (so the page cannot drift from what is run): the database name
(a fresh one), the Redis database (a spare one of this run's), the example API's port
(a free one, and `api_url` set to it), the sample credentials' database (the test data
database, edited right after the copy) and `pip install .`
(tests/acceptance/test_install.py installs the package; here `noetl-celery` is this checkout's CLI).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.support import services

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"
SECTION = "## Embedded, then distributed"
TIMEOUT = 240  # seconds for the whole block; it takes about 20
pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(600)]


def quick_start() -> str:
    """The first ```sh block under SECTION."""
    text = PAGE.read_text()
    block = re.search(r"^```sh\n(.*?)^```", text[text.index(SECTION) :], re.S | re.M)
    assert block, f"{PAGE}: no sh block under {SECTION!r}"
    return block.group(1)


def replace_once(script: str, old: str, new: str) -> str:
    assert script.count(old) == 1, f"getting-started.md changed: {old!r} not found once"
    return script.replace(old, new)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def database_name() -> Iterator[str]:
    name = f"noetl_quick_start_{uuid.uuid4().hex[:10]}"
    yield name  # the script creates it
    services.drop_database(name)


@pytest.fixture
def redis_url() -> str:
    """A Redis database of its own: the session's workers (on another engine database)
    would take this engine's messages from the shared one and refuse them, slowly."""
    services.redis_client(services.SPARE_REDIS_URL).flushdb()
    return services.SPARE_REDIS_URL


def test_the_quick_start_runs_as_written(
    database_name: str, data_db: str, redis_url: str, tmp_path: Path
) -> None:
    script = quick_start()
    port = free_port()
    script = replace_once(script, "pip install .  ", ":  ")
    script = replace_once(script, "-U postgres noetl  ", f"-U postgres {database_name}  ")
    script = replace_once(script, "127.0.0.1:5432/noetl\n", f"127.0.0.1:5432/{database_name}\n")
    script = replace_once(script, "redis://127.0.0.1:6379/0", redis_url)
    script = replace_once(script, "example-api &", f"example-api --port {port} --quiet &")
    script = replace_once(
        script,
        "api_to_postgres.yaml ",
        f"api_to_postgres.yaml --set api_url=http://127.0.0.1:{port} --json ",
    )
    # the sample's pg_example points at the database `postgres`: the test's own instead
    copy = "credentials.example.json credentials.json"
    edit = (
        f"{sys.executable} -c \"import json; f='credentials.json'; d=json.load(open(f)); "
        f"d['pg_example']['db_name']='{conninfo_to_dict(data_db)['dbname']}'; "
        "json.dump(d, open(f, 'w'))\""
    )
    script = re.sub(rf"^(cp .*{re.escape(copy)}.*)$", rf"\1\n{edit}", script, count=1, flags=re.M)
    assert edit in script

    work = tmp_path / "checkout"
    work.mkdir()
    shutil.copytree(ROOT / "playbooks" / "examples", work / "playbooks" / "examples")
    # `noetl-celery` is this checkout's CLI; `exec` makes a background job the process
    # itself, so the trap below stops the worker and the API (and the worker's children)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cli = bin_dir / "noetl-celery"
    cli.write_text(f'#!/bin/sh\nexec {sys.executable} -m noetl_celery.cli.main "$@"\n')
    cli.chmod(0o755)
    prelude = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOETL_")}
    env.update(
        HOME=str(tmp_path / "home"),
        PYTHONPATH=str(ROOT),
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
    )
    # its own session: on a timeout the whole group (bash, the worker, the API) is killed,
    # not only bash, whose EXIT trap would not run
    with subprocess.Popen(
        ["bash", "-c", prelude + script],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as running:
        try:
            stdout, stderr = running.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(running.pid, signal.SIGKILL)
            out, err = (text[-3000:] for text in running.communicate())
            pytest.fail(f"the quick start took over {TIMEOUT} s:\n{out}\n{err}")
    proc = subprocess.CompletedProcess(running.args, running.returncode, stdout, stderr)
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    # three JSON summaries: embedded hello_world, distributed hello_world, api_to_postgres
    summaries = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [s["status"] for s in summaries] == ["COMPLETED"] * 3, proc.stdout[-4000:]
    assert summaries[0]["result"]["greeted"] == summaries[1]["result"]["greeted"] == 3
    assert summaries[2]["result"]["rows"][0]["orders"] == 50
    assert (tmp_path / "home" / ".noetl-celery" / "noetl.sqlite3").is_file()  # embedded
    # the distributed runs are in the database the page created, run by the worker
    assert "Task noetl.execute_command" in proc.stderr and "succeeded" in proc.stderr
    assert (work / "credentials.json").is_file()
