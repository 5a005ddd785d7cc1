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

After each case the rate-limited routes' 200 and 429 answers are printed (bench.compat_kit)
and, with `--rate-limit R`, the case's CLI time against the rate bound (answered ÷ R).
NOETL_BATCH_SIZE (default: the engine's, 50) reaches the workers and the CLI. Unless
`--db` is given, the fixture tables go to the kit's database `noetl_compat` plus
NOETL_BENCH_DB_SUFFIX (benches run side by side keep apart). `--help` prints this and
the kit's options, and starts nothing (no database dropped, no Redis db flushed).
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
from noetl_celery.settings import DEFAULT_BATCH_SIZE

WORKERS = 2
POOL = os.environ.get("NOETL_BENCH_POOL", "prefork")
CONCURRENCY = os.environ.get("NOETL_BENCH_CONCURRENCY", "2")
BATCH_SIZE = os.environ.get("NOETL_BATCH_SIZE", str(DEFAULT_BATCH_SIZE))
DATA_DB = "postgresql://postgres@127.0.0.1:5432/noetl_compat" + os.environ.get(
    "NOETL_BENCH_DB_SUFFIX", ""
)


def main(argv: list[str]) -> int:
    if not COMPAT_KIT.exists():
        print(f"compat kit not found at {COMPAT_KIT}", file=sys.stderr)
        return 2
    if "-h" in argv or "--help" in argv:  # before anything is dropped, flushed or started
        print(__doc__)
        return subprocess.run([python(), str(COMPAT_KIT), "--help"]).returncode
    if not any(a == "--db" or a.startswith("--db=") for a in argv):
        argv = ["--db", DATA_DB, *argv]
    data_db = argv[argv.index("--db") + 1] if "--db" in argv else None
    logs = Path(tempfile.mkdtemp(prefix="noetl-compat-"))
    url = fresh_database("noetl_compat_engine")
    creds = logs / "credentials.json"
    # the credentials the workers get name the database the kit checks
    where = ["--db", data_db] if data_db else [a for a in argv if a.startswith("--db=")]
    subprocess.run(
        [python(), str(COMPAT_KIT), *where, "--write-credentials", str(creds)], check=True
    )
    flush_redis()
    env = env_for(
        NOETL_DATABASE_URL=url,
        NOETL_BROKER_URL=REDIS_URL,
        NOETL_CREDENTIALS_FILE=str(creds),
        NOETL_BATCH_SIZE=BATCH_SIZE,
    )
    print(f"engine db {url}, broker {REDIS_URL}, logs in {logs}", file=sys.stderr)
    cmd = [python(), "-m", "noetl_celery.cli.main", "worker", "-c", CONCURRENCY, "-P", POOL]
    cmd += ["-l", "INFO"]
    print(
        f"workers {WORKERS} x --pool {POOL} -c {CONCURRENCY}, NOETL_BATCH_SIZE {BATCH_SIZE}",
        file=sys.stderr,
    )
    with ExitStack() as stack:
        for n in range(WORKERS):
            stack.enter_context(worker([*cmd, "-n", f"compat{n}@%h"], env, logs / f"w{n}.log"))
        kit = [python(), "-m", "bench.compat_kit", *argv]  # run.py, plus the API's answers
        return subprocess.run(kit, env=env, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
