"""The chaos suite's cluster: a Postgres and a Redis of its own (so they can be wiped,
killed and restarted), two real `noetl-celery worker` processes and a `noetl-celery beat`
sending the reaper every second. Leases, grace periods and the bound on an idle
transaction are a few seconds, so lost work comes back within seconds. After its fault
each test checks that every worker and beat process is still alive and serving
(`Cluster.check_fleet`), and reports its recovery times and the longest stall of
progress (printed at the end of the run).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from noetl_celery.constants import QUEUE_COMMANDS, QUEUE_ORCHESTRATE, TERMINAL_STATUSES
from noetl_celery.engine.service import Engine
from noetl_celery.orchestrator.ids import base_command_id
from noetl_celery.routing import parse_queue_by_kind
from tests.conftest import _env
from tests.support import services
from tests.support.engines import celery_engine
from tests.support.private_services import PrivatePostgres, PrivateRedis
from tests.support.sockets import process_group
from tests.support.workers import BeatProcess, WorkerProcess

PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"
TEMPLATE = "chaos_template"
DATA = "chaos_data"
# the queues a RabbitMQ test deletes first (the engine's, and those the routing tests use)
ENGINE_QUEUES = (QUEUE_COMMANDS, QUEUE_ORCHESTRATE, "io", "cpu")
RECOVERY: list[tuple[str, str, float, str]] = []  # (test, what, value, unit)


def report(test: str, what: str, value: float, unit: str = "s") -> None:
    """A figure for the end-of-run report (recovery times, stalls, progress)."""
    RECOVERY.append((test, what, round(value, 2), unit))


TERMINAL = "('command.completed', 'command.failed')"
# a follow-up run after a fault: small, so checking that every process still serves is cheap
FOLLOW_UP = 20

# short enough that a test sees recovery within seconds
CHAOS_SETTINGS = {
    "NOETL_LEASE_SECONDS": "4",
    "NOETL_REAPER_INTERVAL_SECONDS": "1",
    "NOETL_ISSUED_GRACE_SECONDS": "3",
    "NOETL_WAKE_GRACE_SECONDS": "2",
    "NOETL_MAX_ATTEMPTS": "10",
    # a frozen holder of an execution's lock loses it (its transaction) after this long
    "NOETL_DB_IDLE_IN_TRANSACTION_SECONDS": "3",
    # the workers' passes publish batches (off by default): faults hit batches too
    "NOETL_BATCH_SIZE": "50",
}


@pytest.fixture(scope="session")
def private_pg() -> Iterator[PrivatePostgres]:
    from noetl_celery.store.database import Database

    pg = PrivatePostgres()
    pg.init()
    pg.start()
    try:
        pg.create_database(TEMPLATE)
        database = Database(pg.url(TEMPLATE))
        database.upgrade()
        database.dispose()
        pg.create_database(DATA)
        yield pg
    finally:
        pg.destroy()


@pytest.fixture(scope="session")
def private_redis() -> Iterator[PrivateRedis]:
    redis = PrivateRedis()
    redis.start()
    yield redis
    redis.stop()


@dataclass
class Cluster:
    pg: PrivatePostgres
    redis: PrivateRedis
    url: str
    dsn: str
    data_dsn: str
    env: dict[str, str]
    engine: Engine
    workers: list[WorkerProcess]
    beat: BeatProcess | None  # None: no beat (the workers' relays alone, engine.outbox)
    test: str

    def start(self, playbook: str, **payload: Any) -> str:
        return self.engine.start_text((PLAYBOOKS / playbook).read_text(), payload)

    def query(self, sql: str, *params: Any, data: bool = False) -> list[tuple[Any, ...]]:
        """Read the engine's (or the playbook's) tables, riding out a restarting server."""
        deadline = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect(self.data_dsn if data else self.dsn, connect_timeout=3) as c:
                    return c.execute(sql, params).fetchall()
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def status(self, eid: str) -> str:
        return str(self.query("SELECT status FROM executions WHERE execution_id = %s", eid)[0][0])

    def finished(self, eid: str) -> int:
        """Terminal command events so far."""
        return int(
            self.query(
                "SELECT count(*) FROM events WHERE execution_id = %s "
                "AND type IN ('command.completed', 'command.failed')",
                eid,
            )[0][0]
        )

    def wait_finished(self, eid: str, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.finished(eid) < count:
            assert time.monotonic() < deadline, f"fewer than {count} commands finished"
            time.sleep(0.05)

    def in_flight(self, eid: str) -> set[str]:
        """Logical ids of the commands issued or running now."""
        rows = self.query(
            "SELECT command_id FROM commands WHERE execution_id = %s "
            "AND status IN ('issued', 'running')",
            eid,
        )
        return {base_command_id(r[0]) for r in rows}

    def recovery(self, eid: str, lost: set[str], fault_at: dt.datetime, what: str) -> float:
        """Seconds from the fault until the last of the `lost` commands (in flight at the
        fault) had its terminal event, whatever attempt ran it; recorded for the report.
        Call it once the execution has ended."""
        rows = self.query(
            "SELECT command_id, min(created_at) FROM events WHERE execution_id = %s "
            "AND type IN ('command.completed', 'command.failed') GROUP BY command_id",
            eid,
        )
        first: dict[str, dt.datetime] = {}
        for command_id, at in rows:
            key = base_command_id(command_id)
            first[key] = min(at, first.get(key, at))
        missing = lost - first.keys()
        assert not missing, f"{len(missing)} commands in flight at the fault never finished"
        last = max((first[c] for c in lost), default=fault_at)
        seconds = max(0.0, (last - fault_at).total_seconds())
        report(self.test, what, seconds)
        return seconds

    def wait(self, eid: str, timeout: float = 300) -> str:
        deadline = time.monotonic() + timeout
        while (status := self.status(eid)) not in TERMINAL_STATUSES:
            if time.monotonic() > deadline:
                tails = "\n".join(w.tail(15) for w in self.workers)
                raise AssertionError(f"execution {eid} still {status}\n{tails}")
            time.sleep(0.2)
        return status

    def loop_dones(self, eid: str) -> list[tuple[str, int]]:
        rows = self.query(
            "SELECT step, epoch FROM events WHERE execution_id = %s AND type = 'loop.done' "
            "ORDER BY event_id",
            eid,
        )
        return [(r[0], r[1]) for r in rows]

    def stats(self, eid: str, step: str) -> dict[str, int]:
        row = self.query(
            "SELECT total, succeeded, failed FROM loops WHERE execution_id = %s AND step = %s",
            eid,
            step,
        )[0]
        return {"total": row[0], "success": row[1], "failed": row[2]}

    def result(self, eid: str) -> Any:
        raw = self.query("SELECT result FROM executions WHERE execution_id = %s", eid)[0][0]
        return json.loads(raw) if isinstance(raw, str) else raw

    def processes(self) -> list[WorkerProcess]:
        return [*self.workers, *([self.beat] if self.beat is not None else [])]

    def alive(self) -> None:
        """Every worker and beat process still runs: a fault may kill a task or a pool
        process (restarted by its worker), never a whole worker or beat."""
        for process in self.processes():
            code = process.proc.poll()
            assert code is None, f"{process.name} exited ({code}):\n{process.tail(40)}"

    def longest_stall(self, eid: str, since: dt.datetime) -> float:
        """The longest time, from `since` to the end of the execution, in which no command
        of it finished (the first gap starts at `since`): how long the fault stopped
        progress. Call it once the execution has ended."""
        rows = self.query(
            f"SELECT created_at FROM events WHERE execution_id = %s AND type IN {TERMINAL} "
            "AND created_at >= %s ORDER BY created_at",
            eid,
            since,
        )
        times = [since, *(r[0] for r in rows)]
        return max((b - a).total_seconds() for a, b in itertools.pairwise(times))

    def finished_between(self, eid: str, start: dt.datetime, end: dt.datetime) -> int:
        return int(
            self.query(
                f"SELECT count(*) FROM events WHERE execution_id = %s AND type IN {TERMINAL} "
                "AND created_at >= %s AND created_at < %s",
                eid,
                start,
                end,
            )[0][0]
        )

    def serving(self, pids: tuple[int, ...] = (), timeout: float = 90) -> int:
        """Every worker (each process group) and every pid in `pids` claims commands of
        small follow-up runs, which complete exactly; and beat still sends the reaper.
        Runs follow-ups until each has served (with two workers one run nearly always
        suffices); returns how many it ran."""
        # the test's own client may hold pooled connections to a Postgres that restarted
        # (its first call would fail once, as any pooled client's): start from fresh ones,
        # as a `noetl-celery run` process always does
        self.engine.database.dispose()
        want = {w.proc.pid for w in self.workers}
        served: set[int] = set()
        groups: set[int] = set()
        started = utcnow()
        deadline = time.monotonic() + timeout
        runs = 0
        while not (want <= groups and set(pids) <= served):
            assert time.monotonic() < deadline, (
                f"not serving after the fault: worker groups {want - groups}, "
                f"pids {set(pids) - served} claimed nothing in {timeout:g}s"
            )
            eid = self.start("chaos_loop.yaml", n=FOLLOW_UP, window=10)
            runs += 1
            assert_loop_exact(self, eid, FOLLOW_UP)
            for (worker,) in self.query(
                "SELECT DISTINCT worker FROM commands WHERE execution_id = %s", eid
            ):
                pid = int(str(worker).rsplit(":", 1)[1])
                served.add(pid)
                group = process_group(pid)
                if group is not None:
                    groups.add(group)
        # beat: a reaper sweep began (or ended) after the follow-ups started
        while self.beat is not None:
            swept = self.query("SELECT expires_at FROM leases WHERE name = 'reaper'")
            if swept and swept[0][0] >= started:
                break
            assert time.monotonic() < deadline, "beat sent no reaper after the fault"
            time.sleep(0.2)
        return runs

    def check_fleet(self, eid: str | None, since: dt.datetime, pids: tuple[int, ...] = ()) -> float:
        """After a fault: every process alive and serving; the longest stall of `eid`
        since `since` (recorded for the report, returned)."""
        self.alive()
        stall = 0.0
        if eid is not None:
            stall = self.longest_stall(eid, since)
            report(self.test, "longest stall", stall)
        started = time.monotonic()
        runs = self.serving(pids)
        report(self.test, f"all serving after {runs} follow-up run(s)", time.monotonic() - started)
        self.alive()
        return stall

    def left_running(self, eid: str) -> int:
        return int(
            self.query(
                "SELECT count(*) FROM commands WHERE execution_id = %s "
                "AND status IN ('planned', 'issued', 'running')",
                eid,
            )[0][0]
        )


@pytest.fixture
def cluster_factory(
    private_pg: PrivatePostgres,
    private_redis: PrivateRedis,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Any]:
    """`make(worker_module=...)` builds the cluster; it is torn down after the test."""
    made: list[Cluster] = []

    def make(
        worker_module: str = "noetl_celery.cli.main",
        duplicate: bool = False,
        beat: bool = True,
        broker_url: str | None = None,
        workers: int = 2,
        **extra_env: str,
    ) -> Cluster:
        """`broker_url`: another broker than the private Redis (RabbitMQ: its engine
        queues are deleted first)."""
        name = f"chaos_{uuid.uuid4().hex[:10]}"
        private_pg.create_database(name, TEMPLATE)
        private_redis.client().flushall()
        broker = broker_url or private_redis.url
        if broker_url is not None:
            services.reset_amqp(broker_url, ENGINE_QUEUES)
        creds = tmp_path / "credentials.json"
        entry = {
            "db_host": "127.0.0.1",
            "db_port": str(private_pg.port),
            "db_user": "postgres",
            "db_password": "",
            "db_name": DATA,
        }
        creds.write_text(json.dumps({"pg_test": entry}))
        url = private_pg.url(name)
        env = _env(
            NOETL_DATABASE_URL=url,
            NOETL_BROKER_URL=broker,
            NOETL_CREDENTIALS_FILE=str(creds),
            NOETL_HOME=str(tmp_path / "home"),
            **{**CHAOS_SETTINGS, **extra_env},
        )
        fleet = [WorkerProcess(f"c{i}", env, module=worker_module) for i in range(1, workers + 1)]
        beat_process = BeatProcess(env) if beat else None
        for process in (*fleet, *([beat_process] if beat_process is not None else [])):
            process.wait_ready()
        engine = celery_engine(
            url,
            broker,
            tmp_path / "engine",
            creds,
            duplicate,
            queue_type=env.get("NOETL_BROKER_QUEUE_TYPE", "classic"),
            queue_by_kind=parse_queue_by_kind(env.get("NOETL_QUEUE_BY_KIND", "")),
        )
        cluster = Cluster(
            pg=private_pg,
            redis=private_redis,
            url=url,
            dsn=private_pg.dsn(name),
            data_dsn=private_pg.dsn(DATA),
            env=env,
            engine=engine,
            workers=fleet,
            beat=beat_process,
            test=request.node.name,
        )
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.engine.close()
        for process in cluster.processes():
            process.stop()


def assert_loop_exact(cluster: Cluster, eid: str, n: int) -> None:
    """COMPLETED; n items exactly once in the result table and in the loop's counts;
    one loop.done; nothing left running."""
    status = cluster.wait(eid)
    assert status == "COMPLETED", cluster.query(
        "SELECT error FROM executions WHERE execution_id = %s", eid
    )
    rows = cluster.result(eid)["rows"]
    assert rows[0]["items"] == n
    assert rows[0]["runs"] >= n  # side effects: at least once
    assert cluster.stats(eid, "each") == {"total": n, "success": n, "failed": 0}
    assert cluster.loop_dones(eid) == [("each", 1)]
    assert cluster.left_running(eid) == 0


def assert_drain_exact(cluster: Cluster, eid: str, n: int) -> None:
    status = cluster.wait(eid)
    assert status == "COMPLETED", cluster.query(
        "SELECT error FROM executions WHERE execution_id = %s", eid
    )
    row = cluster.result(eid)["rows"][0]
    assert row["done"] == n and row["left_over"] == 0, row
    assert row["runs"] >= n
    assert cluster.stats(eid, "drain") == {"total": n, "success": n, "failed": 0}
    assert cluster.loop_dones(eid) == [("drain", 1)]
    assert cluster.left_running(eid) == 0


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if RECOVERY:
        terminalreporter.section("chaos recovery times and longest stalls")
        for test, what, value, unit in RECOVERY:
            terminalreporter.write_line(f"{test:<55} {what:<40} {value:9.2f} {unit}")


def utcnow() -> dt.datetime:
    """What the engine stamps its rows with (naive UTC)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)
