from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.errors import ConfigurationError
from noetl_celery.settings import Settings
from noetl_celery.tools.credentials import CredentialStore
from noetl_celery.tools.services import CREDENTIALS_CHECK_SECONDS, ToolServices


def test_one_http_client_shared_by_threads(services: ToolServices) -> None:
    seen: list[object] = []
    barrier = threading.Barrier(16)

    def grab() -> None:
        barrier.wait()
        seen.append(services.http_client())

    threads = [threading.Thread(target=grab) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 16 and all(client is seen[0] for client in seen)
    assert services.http_client(verify=False) is not seen[0]
    assert services.http_client(verify=False) is services.http_client(verify=False)


def test_warm_up_builds_the_http_client_ahead_only_for_http(services: ToolServices) -> None:
    """An embedded run with an http step builds the shared client on a thread of its
    own before the first http command needs it; other kinds build nothing."""
    assert services.warm_up({"python", "postgres"}) is None
    assert services._http == {}
    thread = services.warm_up({"python", "http"})
    assert thread is not None
    thread.join(10)
    warmed = services._http.get(True)
    assert warmed is not None and services.http_client() is warmed


def test_close_then_recreate(services: ToolServices) -> None:
    first = services.http_client()
    services.close()
    assert first.is_closed
    second = services.http_client()
    assert second is not first and not second.is_closed


def test_one_pool_per_conninfo(services: ToolServices) -> None:
    # min_size=0: creating a pool does not connect, so no server is needed here
    a = services.pg_pool("host=127.0.0.1 port=1 dbname=a")
    assert services.pg_pool("host=127.0.0.1 port=1 dbname=a") is a
    b = services.pg_pool("host=127.0.0.1 port=1 dbname=b")
    assert b is not a
    assert a.max_size == 8 and a.min_size == 0
    assert a.kwargs is not None and a.kwargs["autocommit"] is True  # type: ignore[index]
    services.close()
    assert a.closed and b.closed


def test_redactor_knows_store_secrets(services: ToolServices, unit_secret: str) -> None:
    assert services.redactor.redact(f"pw was {unit_secret}") == "pw was ***"
    assert services.redactor.redact("tok-Unit-Token-5521") == "***"


def test_credentials_file_from_settings(tmp_path: Path) -> None:
    file = tmp_path / "creds.json"
    file.write_text('{"pg": {"dsn": "postgresql://u:File-Pw-321@h/d"}}')
    svc = ToolServices(Settings(home=tmp_path, credentials_file=str(file)))
    assert svc.credentials.aliases() == ["pg"]
    assert svc.redactor.redact("File-Pw-321") == "***"
    assert ToolServices(Settings(home=tmp_path)).credentials.aliases() == []
    # a missing file does not stop the worker from starting: it fails where it is used
    missing = ToolServices(Settings(home=tmp_path, credentials_file=str(tmp_path / "missing.json")))
    with pytest.raises(ConfigurationError, match=r"missing\.json"):
        missing.credentials  # noqa: B018
    assert missing.redactor.redact("x") == "x"
    explicit = CredentialStore.empty()
    assert (
        ToolServices(Settings(home=tmp_path, credentials_file=str(file)), explicit).credentials
        is explicit
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def rewrite(file: Path, text: str) -> None:
    file.write_text(text)
    stat = file.stat()
    os.utime(file, (stat.st_atime, stat.st_mtime + 5))  # a different mtime for sure


def services_on_a_file(tmp_path: Path) -> tuple[Path, FakeClock, ToolServices]:
    """Tool services reading a credentials file with one alias, on a clock of the test's."""
    file = tmp_path / "creds.json"
    file.write_text('{"a": {"dsn": "postgresql://u:Old-Pw-111@h/d"}}')
    clock = FakeClock()
    svc = ToolServices(Settings(home=tmp_path, credentials_file=str(file)), clock=clock)
    assert svc.credentials.aliases() == ["a"]
    return file, clock, svc


def test_credentials_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    file, clock, svc = services_on_a_file(tmp_path)
    rewrite(file, '{"a": {"dsn": "postgresql://u:New-Pw-222@h/d"}, "b": {"dsn": "x"}}')
    clock.now += CREDENTIALS_CHECK_SECONDS
    assert svc.credentials.aliases() == ["a", "b"]
    assert svc.redactor.redact("New-Pw-222") == "***"


def test_credentials_file_is_looked_at_once_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "creds.json"
    file.write_text('{"a": {"dsn": "postgresql://u:Old-Pw-111@h/d"}}')
    clock = FakeClock()
    svc = ToolServices(Settings(home=tmp_path, credentials_file=str(file)), clock=clock)
    stats: list[object] = []
    real_stat = os.stat

    def counting_stat(path: Any, **kwargs: Any) -> os.stat_result:
        if isinstance(path, str) and path == str(file):  # the service's, not pathlib's
            stats.append(path)
        return real_stat(path, **kwargs)

    monkeypatch.setattr(os, "stat", counting_stat)  # the module services.py calls
    for _ in range(50):  # a command asks many times: one look at the file
        assert svc.credentials.aliases() == ["a"]
        svc.redactor.redact("x")
    assert len(stats) == 1
    rewrite(file, '{"b": {"dsn": "postgresql://u:New-Pw-222@h/d"}}')
    clock.now += CREDENTIALS_CHECK_SECONDS / 2
    assert svc.credentials.aliases() == ["a"]  # within the second: the file read before
    assert len(stats) == 1
    clock.now += CREDENTIALS_CHECK_SECONDS / 2
    assert svc.credentials.aliases() == ["b"]
    assert svc.redactor.redact("New-Pw-222") == "***"
    assert len(stats) == 2


def test_a_bad_credentials_file_is_looked_at_on_every_ask(tmp_path: Path) -> None:
    file, clock, svc = services_on_a_file(tmp_path)
    rewrite(file, "{not json")
    clock.now += CREDENTIALS_CHECK_SECONDS
    for _ in range(2):  # every ask fails while the file is bad, not just the first
        with pytest.raises(ConfigurationError, match="invalid JSON"):
            svc.credentials  # noqa: B018
    rewrite(file, '{"c": {"dsn": "x"}}')  # fixed: seen at once, no second to wait
    assert svc.credentials.aliases() == ["c"]
