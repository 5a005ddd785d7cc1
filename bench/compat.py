"""Run the NoETL compatibility kit in distributed mode: a fresh engine database on
Postgres, Redis as the broker and two `noetl-celery worker` processes (concurrency 2).

    python -m bench.compat --tier core,negative
    python -m bench.compat --keep-going            # every tier but heavy
    python -m bench.compat --tier heavy --server-args '--rate-limit 200'

Arguments go to `../shared/compat/run.py` unchanged; the exit status is the kit's. Worker
logs are kept under a temporary directory printed at the start. The workers' pool and
concurrency come from the environment (the arguments are the kit's):

    NOETL_BENCH_POOL=threads NOETL_BENCH_CONCURRENCY=16 python -m bench.compat \
        --tier heavy --case pft_flow_full --server-args '--rate-limit 300'
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from bench.harness import (
    COMPAT_KIT,
    REDIS_URL,
    ROOT,
    env_for,
    flush_redis,
    fresh_database,
    python,
    worker,
)

WORKERS = 2
POOL = os.environ.get("NOETL_BENCH_POOL", "prefork")
CONCURRENCY = os.environ.get("NOETL_BENCH_CONCURRENCY", "2")


def main(argv: list[str]) -> int:
    if not COMPAT_KIT.exists():
        print(f"compat kit not found at {COMPAT_KIT}", file=sys.stderr)
        return 2
    logs = Path(tempfile.mkdtemp(prefix="noetl-compat-"))
    url = fresh_database("noetl_compat_engine")
    creds = logs / "credentials.json"
    subprocess.run([python(), str(COMPAT_KIT), "--write-credentials", str(creds)], check=True)
    flush_redis()
    env = env_for(
        NOETL_DATABASE_URL=url, NOETL_BROKER_URL=REDIS_URL, NOETL_CREDENTIALS_FILE=str(creds)
    )
    print(f"engine db {url}, broker {REDIS_URL}, logs in {logs}", file=sys.stderr)
    cmd = [python(), "-m", "noetl_celery.cli.main", "worker", "-c", CONCURRENCY, "-P", POOL]
    cmd += ["-l", "INFO"]
    print(f"workers: {WORKERS} x --pool {POOL} -c {CONCURRENCY}", file=sys.stderr)
    with ExitStack() as stack:
        for n in range(WORKERS):
            stack.enter_context(worker([*cmd, "-n", f"compat{n}@%h"], env, logs / f"w{n}.log"))
        return subprocess.run([python(), str(COMPAT_KIT), *argv], env=env, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
