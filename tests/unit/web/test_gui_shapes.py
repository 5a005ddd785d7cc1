"""web.gui_shapes: the run dialog's field kinds, credentials without a secret, the
dashboard's counts."""

from __future__ import annotations

import datetime as dt

from noetl_celery.tools.credentials import CredentialStore
from noetl_celery.web import gui_shapes as gui

NOW = dt.datetime(2026, 1, 2, 3, 4, 5)


def test_field_kinds_follow_the_default() -> None:
    assert [gui.field_kind(v) for v in ("a", 1, 1.5, True, None, [1], {"a": 1})] == [
        "string",
        "integer",
        "number",
        "boolean",
        "null",
        "array",
        "object",
    ]
    form = gui.ui_schema("a/b", 2, {"workload": {"when": dt.date(2026, 1, 2)}}, NOW)
    assert form["fields"][0]["default"] == "2026-01-02"
    assert form["generated_at"] == "2026-01-02T03:04:05Z"
    assert gui.ui_schema("a/b", 1, "not a mapping", NOW)["fields"] == []


def test_credentials_show_public_fields_only() -> None:
    store = CredentialStore(
        {
            "pg": {"db_host": "h", "db_user": "u", "db_password": "pw-1234", "db_name": "d"},
            "url": {"dsn": "postgresql://u:pw-5678@h/d"},
            "odd": {"host": "pw-1234", "api_key": "k-999", "client_id": "c"},
        }
    )
    secrets = store.secret_values()
    shown = {
        alias: gui.credential_entry(store.resolve(alias), secrets, NOW, include_data=True)
        for alias in store.aliases()
    }
    assert shown["pg"]["data"] == {"db_host": "h", "db_user": "u", "db_name": "d"}
    assert shown["pg"]["meta"]["hidden_fields"] == ["db_password"]
    assert shown["url"]["data"] == {} and shown["url"]["meta"]["hidden_fields"] == ["dsn"]
    # a public field holding another credential's secret stays hidden too
    assert shown["odd"]["data"] == {"client_id": "c"}
    text = repr(shown)
    assert "pw-1234" not in text and "pw-5678" not in text and "k-999" not in text
    listed = gui.credential_entry(store.resolve("pg"), secrets, None, include_data=False)
    assert listed["data"] is None and listed["created_at"] is None


def test_dashboard_counts() -> None:
    body = gui.dashboard_body({"COMPLETED": 3, "FAILED": 1, "RUNNING": 2}, 4, 9, 2, 1, [])
    assert (body["total_executions"], body["active_executions"]) == (6, 2)
    assert body["success_rate"] == 75.0
    assert body["stats"]["failed_executions"] == 1
    assert gui.dashboard_body({}, 0, 0, 0, 0, [])["success_rate"] == 0.0
