"""The cursor version of the PFT flow (playbooks/pft_cursor.yaml) at full size against the
compat kit's test API with a rate limit: wall time against the rate bound (rate-limited
requests answered 200 ÷ allowed requests per second), and the exact row counts.

    python -m bench.pft_cursor [--rate-limit 300] [--facilities 10] [--patients 1000]
    python -m bench.pft_cursor --pool threads --concurrency 16     # I/O-bound settings
    python -m bench.pft_cursor --batch-size 50      # NOETL_BATCH_SIZE of the engine (50)
    python -m bench.pft_cursor --close-window 0     # NOETL_CLOSE_WINDOW_SECONDS (0.15)

Postgres + Redis + `--workers` `noetl-celery worker` processes (default two, prefork,
concurrency 2; `--pool threads` runs each worker's commands on threads); the test API
server is `../shared/compat/test_api_server.py` (NOETL_COMPAT_KIT points at another
run.py beside it). The playbook's tables live in the kit's database `noetl_compat` plus
NOETL_BENCH_DB_SUFFIX, so benches run side by side do not truncate each other's.

Besides the ratio it prints the settings the workers ran with, the CPU seconds the worker
processes used per answered request, and how busy the machine's CPUs were meanwhile (a
ratio measured on a saturated machine says more about the machine than the engine). The
workers' CPU per request divided by the test API's is the figure to compare between runs
on a machine whose speed drifts: the test API's work per request never changes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import psycopg

from bench.harness import (
    COMPAT_KIT,
    REDIS_URL,
    ROOT,
    children,
    env_for,
    flush_redis,
    fresh_database,
    machine_cpu,
    python,
    worker,
)
from noetl_celery.settings import DEFAULT_BATCH_SIZE

DATA_DSN = "postgresql://postgres@127.0.0.1:5432/noetl_compat" + os.environ.get(
    "NOETL_BENCH_DB_SUFFIX", ""
)
# full size: pages per data type for patient ids 1..10000 (NoETL's pft_flow_test fixture)
EXPECTED = {
    "pftc_patient_assessments": 29_898,
    "pftc_patient_conditions": 19_907,
    "pftc_patient_medications": 25_024,
    "pftc_patient_vital_signs": 10_000,
    "pftc_patient_demographics": 10_000,
    "pftc_mds_details": 10_000,
}


def start_api(rate_limit: int) -> tuple[subprocess.Popen[str], str]:
    server = COMPAT_KIT.parent / "test_api_server.py"
    cmd = [python(), str(server), "--port", "0", "--rate-limit", str(rate_limit)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    match = re.search(r"listening on (http://\S+)", proc.stdout.readline())
    if not match:
        proc.kill()
        raise RuntimeError("test API server did not start")
    return proc, match.group(1)


def api_stats(url: str) -> dict[str, dict[str, object]]:
    with urllib.request.urlopen(f"{url}/api/v1/stats", timeout=10) as response:
        data = json.load(response)
    return data.get("routes", data)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its live children (prefork pool processes)."""
    total = 0.0
    for p in [pid, *children(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def backend_cpu(databases: set[str]) -> dict[int, float]:
    """CPU seconds so far of each Postgres backend connected to one of `databases`
    (`postgres: <cluster>: <user> <database> <client> <state>` in its command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().decode(errors="replace").split()
        except OSError:
            continue
        if len(words) >= 4 and words[0] == "postgres:" and words[3] in databases:
            found[int(entry.name)] = cpu_seconds(int(entry.name))
    return found


def _declared_for(pacing: str) -> str:
    """Whose rate a declared NOETL_HTTP_RATE_LIMITS is (tools.http_pacing): the worker
    processes' together when they share one schedule, each process's otherwise."""
    return "for the workers together" if pacing == "on" else "per worker"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate-limit", type=int, default=300)
    parser.add_argument("--facilities", type=int, default=10)
    parser.add_argument("--patients", type=int, default=1000)
    parser.add_argument("--pool", default="prefork", help="the workers' Celery pool")
    parser.add_argument("--concurrency", type=int, default=2, help="per worker")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=int(os.environ.get("NOETL_BATCH_SIZE", str(DEFAULT_BATCH_SIZE))),
        help="NOETL_BATCH_SIZE of the workers and the CLI (default: $NOETL_BATCH_SIZE or 50)",
    )
    parser.add_argument(
        "--pacing",
        choices=("on", "process", "off"),
        default="on",
        help="NOETL_HTTP_PACING of the workers: the http tool's per-host pacer (on: one "
        "schedule for the workers, in the engine database; process: one per worker)",
    )
    parser.add_argument(
        "--declare",
        type=float,
        default=0.0,
        help="NOETL_HTTP_RATE_LIMITS of the workers for the test API (requests/s: the "
        "workers' together with --pacing on, each worker's with --pacing process)",
    )
    parser.add_argument(
        "--close-window",
        type=float,
        default=None,
        help="NOETL_CLOSE_WINDOW_SECONDS of the workers (default: the engine's, 0.15): how "
        "long a close of a command run beside a slow one waits for others of its process",
    )
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="bench-pft-cursor-"))
    creds = logs / "credentials.json"
    subprocess.run(
        [python(), str(COMPAT_KIT), "--db", DATA_DSN, "--write-credentials", str(creds)], check=True
    )
    url = fresh_database("noetl_bench_pft_cursor")
    flush_redis()
    env = env_for(
        NOETL_DATABASE_URL=url,
        NOETL_BROKER_URL=REDIS_URL,
        NOETL_CREDENTIALS_FILE=str(creds),
        NOETL_BATCH_SIZE=str(args.batch_size),
    )
    cli = [python(), "-m", "noetl_celery.cli.main"]
    api, api_url = start_api(args.rate_limit)
    env["NOETL_HTTP_PACING"] = args.pacing
    if args.close_window is not None:
        env["NOETL_CLOSE_WINDOW_SECONDS"] = f"{args.close_window:g}"
    if args.declare:
        env["NOETL_HTTP_RATE_LIMITS"] = f"{api_url.split('//', 1)[1]}={args.declare:g}"
    try:
        with ExitStack() as stack:
            procs = []
            for n in range(args.workers):
                cmd = [*cli, "worker", "-c", str(args.concurrency), "-P", args.pool]
                cmd += ["-n", f"pft{n}@%h"]
                procs.append(stack.enter_context(worker(cmd, env, logs / f"w{n}.log")))
            cpu_before = sum(cpu_seconds(p.pid) for p in procs)
            databases = {url.rsplit("/", 1)[1], DATA_DSN.rsplit("/", 1)[1]}
            pg_before = backend_cpu(databases)
            api_before = cpu_seconds(api.pid)
            cli_before = resource.getrusage(resource.RUSAGE_CHILDREN)
            busy_before = machine_cpu()
            started = time.time()
            run = subprocess.run(
                [
                    *cli,
                    "run",
                    str(ROOT / "playbooks" / "pft_cursor.yaml"),
                    "--json",
                    "--set",
                    f"api_url={api_url}",
                    "--set",
                    f"num_facilities={args.facilities}",
                    "--set",
                    f"patients_per_facility={args.patients}",
                ],
                env=env,
                capture_output=True,
                text=True,
            )
            wall = time.time() - started
            worker_cpu = sum(cpu_seconds(p.pid) for p in procs) - cpu_before
            # backends that ended during the run are missed: a lower bound
            pg_cpu = sum(t - pg_before.get(pid, 0.0) for pid, t in backend_cpu(databases).items())
            api_cpu = cpu_seconds(api.pid) - api_before
            cli_after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cli_cpu = (cli_after.ru_utime + cli_after.ru_stime) - (
                cli_before.ru_utime + cli_before.ru_stime
            )
            busy_after = machine_cpu()
        stats = api_stats(api_url)
    finally:
        api.kill()
    summary = json.loads(run.stdout)
    ok = 0
    limited = 0
    for route, counters in stats.items():
        if route.startswith("/api/v1/patient/") and isinstance(counters, dict):
            codes = counters.get("status", {})
            assert isinstance(codes, dict)
            ok += int(codes.get("200", 0)) + int(codes.get("404", 0))
            limited += int(codes.get("429", 0))
    bound = ok / args.rate_limit
    print(f"status {summary['status']} error {summary['error']}")
    print(f"wall {wall:.1f} s; rate-limited requests answered {ok} (+{limited} x 429)")
    settings = (
        f"workers {args.workers} x --pool {args.pool} -c {args.concurrency}, "
        f"NOETL_BATCH_SIZE {args.batch_size}, NOETL_HTTP_PACING {args.pacing}"
        + (f", {args.declare:g}/s declared {_declared_for(args.pacing)}" if args.declare else "")
        + (f", NOETL_CLOSE_WINDOW_SECONDS {args.close_window:g}" if args.close_window else "")
    )
    print(
        f"rate bound {bound:.1f} s at {args.rate_limit}/s; wall / bound = {wall / bound:.2f} "
        f"({settings})"
    )
    busy = (busy_after[0] - busy_before[0]) / max(busy_after[1] - busy_before[1], 1e-9)
    per = 1000 / max(ok, 1)
    total_cpu = worker_cpu + pg_cpu + api_cpu + cli_cpu
    print(
        f"CPU per answered request: workers {worker_cpu * per:.2f} ms, Postgres backends "
        f"{pg_cpu * per:.2f} ms, test API {api_cpu * per:.2f} ms, CLI {cli_cpu * per:.2f} ms; "
        f"total {total_cpu * per:.2f} ms = {total_cpu * per * args.rate_limit / 1000:.2f} "
        f"cores at {args.rate_limit}/s"
    )
    print(f"machine CPUs {100 * busy:.0f}% busy during the run ({os.cpu_count()} cores)")
    # the test API does the same work per request in every run: its CPU per request says
    # how fast the machine is right now, so this ratio compares runs across machine drift
    print(
        f"worker CPU per request / test API CPU per request: "
        f"{worker_cpu / max(api_cpu, 1e-9):.1f} (lower: less engine work per request)"
    )
    scale = args.facilities * args.patients / 10_000
    with psycopg.connect(DATA_DSN) as conn:
        for table, full in EXPECTED.items():
            count = conn.execute(f"SELECT count(*) FROM public.{table}").fetchone()
            print(
                f"{table:28} {count[0] if count else 0:>7}"
                + (f"  (full size: {full})" if scale == 1 else "")
            )
        done = conn.execute(
            "SELECT count(*) FROM public.pftc_queue WHERE execution_id = %s AND status = 'done'",
            (summary["execution_id"],),
        ).fetchone()
    print(f"{'queue rows done':28} {done[0] if done else 0:>7}  (6 per patient)")
    print(f"logs in {logs}")
    return 0 if summary["status"] == "COMPLETED" else 1


if __name__ == "__main__":
    sys.exit(main())
