"""Real services for tests: Postgres databases cloned from a migrated template, Redis.

A missing service fails the run with a message saying how to start it; nothing is
skipped, so a broken environment can never look green.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
import redis
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ADMIN_DSN = os.environ.get(
    "NOETL_TEST_PG_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("NOETL_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")


def _next_database(url: str) -> str:
    base, _, db = url.rpartition("/")
    return f"{base}/{(int(db or 0) + 1) % 16}"


# a test running an engine of its own beside the session's workers (which use another
# engine database) needs a broker of its own: on REDIS_URL those workers would take its
# messages, refuse them as foreign and put them back two seconds later, every time
SPARE_REDIS_URL = os.environ.get("NOETL_TEST_SPARE_REDIS_URL", _next_database(REDIS_URL))
# RabbitMQ: a vhost of the tests' own (other runs on the machine use others)
AMQP_URL = os.environ.get("NOETL_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/noetl_test")
AMQP_HINT = (
    "start it: rabbitmq-server -detached (or service rabbitmq-server start), then "
    "rabbitmqctl add_vhost noetl_test && rabbitmqctl set_permissions -p noetl_test guest "
    "'.*' '.*' '.*' (or set NOETL_TEST_AMQP_URL)"
)
PG_HINT = "start it: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
REDIS_HINT = (
    "start it: redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save '' "
    "--appendonly no"
)


def admin_connection() -> psycopg.Connection:
    try:
        return psycopg.connect(ADMIN_DSN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(f"Postgres is required at {ADMIN_DSN} ({exc}); {PG_HINT}", pytrace=False)


def dsn_for(dbname: str) -> str:
    params = conninfo_to_dict(ADMIN_DSN)
    params["dbname"] = dbname
    return make_conninfo("", **params)


def sqlalchemy_url(dbname: str) -> str:
    params = conninfo_to_dict(ADMIN_DSN)
    user = params.get("user", "postgres")
    password = f":{params['password']}" if params.get("password") else ""
    host = params.get("host", "127.0.0.1")
    port = params.get("port", 5432)
    return f"postgresql+psycopg://{user}{password}@{host}:{port}/{dbname}"


def create_database(name: str, template: str | None = None) -> None:
    with admin_connection() as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        if template:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(template)
                )
            )
        else:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def drop_database(name: str) -> None:
    with admin_connection() as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@contextmanager
def cloned_database(template: str, prefix: str = "noetl_t") -> Iterator[str]:
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    create_database(name, template)
    try:
        yield name
    finally:
        drop_database(name)


def redis_client(url: str = REDIS_URL) -> redis.Redis:
    client = redis.Redis.from_url(url, socket_connect_timeout=3)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is required at {url} ({exc}); {REDIS_HINT}", pytrace=False)
    return client


def reset_amqp(url: str, queues: tuple[str, ...]) -> None:
    """Delete `queues` in the vhost of `url` (a test starts from no queued message and
    may declare them with another type); fails the test loudly when RabbitMQ is away."""
    from kombu.connection import Connection

    for last in (False, True):
        try:
            with Connection(url, connect_timeout=5) as conn:
                for name in queues:
                    channel = conn.channel()
                    try:
                        channel.queue_delete(name)
                    finally:
                        channel.close()
            return
        except Exception as exc:
            if last or not _create_local_vhost(url):
                pytest.fail(f"RabbitMQ is required at {url} ({exc}); {AMQP_HINT}", pytrace=False)


def _create_local_vhost(url: str) -> bool:
    """A local RabbitMQ without the tests' vhost (a fresh machine): create it with
    rabbitmqctl, as .ci/run does. False when that is not possible here."""
    host_and_vhost = url.split("@", 1)[-1]
    host, _, vhost = host_and_vhost.partition("/")
    if (
        not host.startswith(("127.0.0.1", "localhost"))
        or not vhost
        or not shutil.which("rabbitmqctl")
    ):
        return False
    created = subprocess.run(["rabbitmqctl", "-q", "add_vhost", vhost], capture_output=True)
    granted = subprocess.run(
        ["rabbitmqctl", "-q", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
        capture_output=True,
    )
    return created.returncode == 0 and granted.returncode == 0
