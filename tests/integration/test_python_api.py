"""The Python API: run() and Client, embedded and on real workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import noetl_celery
from noetl_celery.settings import Settings
from noetl_celery.store.database import Database, SchemaMode

HELLO = Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "hello_world.yaml"


def test_run_embedded(tmp_path: Path) -> None:
    out = noetl_celery.run(HELLO, {"names": ["Mo"]}, settings=Settings(home=tmp_path))
    assert out["status"] == "COMPLETED"
    assert out["result"]["lines"] == ["Hello World, Mo!"]


def test_run_accepts_yaml_text(tmp_path: Path) -> None:
    text = (
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t}\nworkflow:\n"
        "  - step: a\n    tool: {kind: python, code: 'result = {\"n\": 2}'}\n"
    )
    assert noetl_celery.run(text, settings=Settings(home=tmp_path))["result"] == {"n": 2}


@pytest.mark.integration
def test_client_on_workers(distributed: dict[str, Any], tmp_path: Path) -> None:
    settings = Settings(
        home=tmp_path, database_url=distributed["url"], broker_url=distributed["redis_url"]
    )
    with noetl_celery.Client(settings) as client:
        registered = client.register(HELLO)
        assert registered["path"] == "examples/hello_world"
        eid = client.submit_path("examples/hello_world", {"names": ["A", "B"]})
        summary = client.wait(eid, timeout=60)
        assert summary["status"] == "COMPLETED" and summary["result"]["greeted"] == 2
        assert client.status(eid)["status"] == "COMPLETED"
        assert client.events(eid)[-1]["type"] == "execution.completed"
        [line] = client.executions(playbook="examples/hello_world", trigger="manual", limit=1)
        assert line["execution_id"] == eid and line["trigger"] == "manual"
        assert client.executions(playbook="examples/hello_world", trigger="schedule") == []


# --- bad input: an error from the errors.py tree before anything is written ---------------


def deep_payload(depth: int) -> dict[str, Any]:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    assert isinstance(value, dict)
    return value


BAD_API_PAYLOADS: dict[str, tuple[Any, str]] = {
    "500 deep (RecursionError, execution left RUNNING before)": (
        deep_payload(500),
        "payload.a.a.a.a.a.a.a.a.a.a…(64 keys deep): nested deeper than the limit of 64 levels",
    ),
    "NUL (a raw psycopg DataError before)": (
        {"a": {"b": [0, 1, 2, "x\x00"]}},
        "payload.a.b[3]: contains a NUL character (\\u0000), which Postgres cannot store",
    ),
    "lone surrogate": (
        {"a": "\ud800"},
        "payload.a: contains a lone surrogate (\\ud800), which is not valid Unicode text "
        "and Postgres cannot store it",
    ),
    "not a mapping": (["a"], "payload: must be a mapping (a JSON object), not list"),
}


@pytest.mark.parametrize("name", sorted(BAD_API_PAYLOADS))
def test_submit_refuses_bad_payloads_before_writing(
    name: str, store_url: str, tmp_path: Path
) -> None:
    from noetl_celery.errors import CatalogNotFound, NoetlError, PayloadInvalid

    payload, message = BAD_API_PAYLOADS[name]
    # a configured database is migrated by `db upgrade` only (the sqlite one is new here)
    database = Database(store_url)
    database.prepare(SchemaMode.MIGRATE)
    database.dispose()  # its pooled connections, left open, are ResourceWarnings (errors here)
    with noetl_celery.Client(Settings(home=tmp_path, database_url=store_url)) as client:
        with pytest.raises(PayloadInvalid) as info:
            client.submit(HELLO, payload)
        assert str(info.value) == message and isinstance(info.value, NoetlError)
        with pytest.raises(PayloadInvalid):
            client.submit_path("examples/hello_world", payload)
        assert client.executions() == []
        with pytest.raises(CatalogNotFound):  # not even the playbook was registered
            client.engine.store.resolve_catalog("examples/hello_world")


def test_payload_size_limit_comes_from_settings(tmp_path: Path) -> None:
    from noetl_celery.errors import PayloadInvalid

    settings = Settings(home=tmp_path, max_payload_bytes=1000)
    with pytest.raises(PayloadInvalid) as info:
        noetl_celery.run(HELLO, {"names": ["x" * 1000]}, settings=settings)
    assert str(info.value) == (
        "payload: larger than the limit of 1,000 bytes as JSON (NOETL_MAX_PAYLOAD_BYTES)"
    )
    assert Settings.from_env({"NOETL_MAX_PAYLOAD_BYTES": "1000"}).max_payload_bytes == 1000


def test_register_and_run_refuse_bad_files_and_text(tmp_path: Path) -> None:
    from noetl_celery.errors import InputInvalid, PlaybookInvalid

    utf16 = tmp_path / "u16.yaml"
    utf16.write_bytes(HELLO.read_text().encode("utf-16"))  # with a byte-order mark
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    )
    with noetl_celery.Client(Settings(home=tmp_path)) as client:
        with pytest.raises(InputInvalid) as info:
            client.register(utf16)
        assert str(info.value) == (
            f"{utf16}: UTF-16 text found (byte-order mark 0xff 0xfe), not UTF-8; save the "
            "playbook as UTF-8"
        )
        with pytest.raises(PlaybookInvalid) as invalid:
            client.submit(bomb)
        assert [str(p) for p in invalid.value.problems] == [
            "<playbook>:5: YAML aliases (*name) expand this document past the limit of "
            "100,000 nodes (an alias bomb?); it was not expanded"
        ]
        # a one-line text longer than a file name may be is YAML, not an OSError
        with pytest.raises(PlaybookInvalid):
            client.submit("{" + "a: 1, " * 100 + "}")
        assert client.executions() == []


FLAKY = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: api_flaky, path: tests/api_flaky}
workload: {items: [1, 2, 3, 4], fail_on: [2]}
workflow:
  - step: each
    loop: {in: "{{ items }}", iterator: it}
    tool:
      kind: python
      input: {it: "{{ iter.it }}", fail_on: "{{ fail_on }}"}
      code: |
        print("item", it)
        assert it not in fail_on, f"item {it} fails"
        result = it
"""


def test_client_rerun_logs_and_filtered_events(tmp_path: Path) -> None:
    from noetl_celery.errors import ExecutionNotFound
    from noetl_celery.passes.rerun import RerunError

    with noetl_celery.Client(Settings(home=tmp_path)) as client:
        eid = client.submit(FLAKY)
        client.wait(eid, timeout=60)
        [failed] = client.events(eid, types=["command.failed"])
        assert failed["iteration"] == 1
        assert [e["type"] for e in client.events(eid, limit=1)] == [client.events(eid)[-1]["type"]]
        logs = client.logs(eid, step="each")
        assert [(b["iteration"], b["text"]) for b in logs] == [
            (0, "item 1\n"),
            (1, "item 2\n"),
            (2, "item 3\n"),
            (3, "item 4\n"),
        ]
        again = client.rerun(eid, failed_items=True, overrides={"fail_on": []})
        summary = client.wait(again, timeout=60)
        assert summary["status"] == "COMPLETED"
        assert summary["steps"]["each"]["stats"] == {"total": 1, "success": 1, "failed": 0}
        assert [b["text"] for b in client.logs(again)] == ["item 2\n"]
        status = client.status(again)
        assert (status["trigger"], status["rerun_of"]) == ("rerun", eid)
        with pytest.raises(RerunError, match="no step 'nope'"):
            client.rerun(eid, from_step="nope")
        with pytest.raises(ExecutionNotFound):
            client.rerun("1")
