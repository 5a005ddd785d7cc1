from __future__ import annotations

import contextvars
import threading
from typing import Any

import pytest

from noetl_celery.tools.credentials import CredentialStore
from noetl_celery.tools.redaction import (
    Redactor,
    collect_secrets,
    command_masks,
    current_masks,
    is_secret_field,
    mask_command_value,
)


def test_known_secrets_are_masked_everywhere() -> None:
    redactor = Redactor(["hunter2-Pw", "tok-123456"])
    text = 'failed for hunter2-Pw and "tok-123456" twice: hunter2-Pw'
    assert redactor.redact(text) == 'failed for *** and "***" twice: ***'


def test_longest_secret_wins_and_percent_encoding_is_masked() -> None:
    redactor = Redactor(["abc", "abc@def/1"])
    assert redactor.redact("x abc@def/1 y") == "x *** y"
    assert redactor.redact("postgres://u:abc%40def%2F1@h") == "postgres://u:***@h"


def test_short_values_are_not_treated_as_secrets() -> None:
    assert Redactor(["a", "12"]).redact("a 12 banana") == "a 12 banana"


def test_patterns_mask_unknown_secrets() -> None:
    redactor = Redactor()
    assert redactor.redact("host=h password=p4ss dbname=d") == "host=h password=*** dbname=d"
    assert redactor.redact("password = 'a b c' port=1") == "password = *** port=1"
    assert redactor.redact("postgresql://bob:s3cr3t@db:5432/x") == "postgresql://bob:***@db:5432/x"
    assert (
        redactor.redact("GET https://api/x?api_key=K1&page=2")
        == "GET https://api/x?api_key=***&page=2"
    )
    assert redactor.redact("{'db_password': 'zzz-1'}") == "{'db_password': '***'}"
    assert redactor.redact("access_token=abc.def") == "access_token=***"


def test_plain_text_is_untouched() -> None:
    text = 'relation "public.no_such_table" does not exist'
    assert Redactor(["secret-1"]).redact(text) == text
    assert Redactor().redact("") == ""


def test_redact_value_walks_structures() -> None:
    redactor = Redactor(["pw-9999"])
    assert redactor.redact_value({"a": ["x pw-9999", 1], "b": "pw-9999"}) == {
        "a": ["x ***", 1],
        "b": "***",
    }


def test_collect_secrets() -> None:
    record = {"x": {"db_password": 12345, "nested": {"token": "t-1"}, "url": "https://u:p9p9@h"}}
    assert collect_secrets(record) == {"12345", "t-1", "p9p9"}
    assert is_secret_field("DB_PASSWORD") and is_secret_field("api_key")
    assert not is_secret_field("db_host")


def test_from_store() -> None:
    store = CredentialStore({"pg": {"db_password": "Store-Pw-6161", "db_host": "h"}})
    redactor = Redactor.from_store(store)
    assert redactor.secret_count >= 1
    assert redactor.redact("x Store-Pw-6161 h") == "x *** h"


def test_an_alias_name_is_not_a_field_name() -> None:
    # "key" in `pg_keycloak` used to make the whole credential secret: host, port,
    # user and database were then masked in every connection error
    store = CredentialStore(
        {
            "pg_keycloak": {
                "db_host": "kc-db.internal",
                "db_port": 5433,
                "db_user": "keycloak",
                "db_password": "Kc-Pw-1199",
                "db_name": "keycloak_prod",
            }
        }
    )
    assert store.secret_values() == {"Kc-Pw-1199"}


def test_connection_names_are_never_secrets_even_under_a_secret_field() -> None:
    record = {
        "secrets": {
            "db_host": "h-7788",
            "db_name": "d-7788",
            "db_password": "p-7788",
            "x": "x-7788",
        }
    }
    assert collect_secrets(record) == {"p-7788", "x-7788"}
    # a nested secret under a public field is still found by its own name
    assert collect_secrets({"user": {"name": "u", "token": "t-8899"}}) == {"t-8899"}


@pytest.mark.parametrize(
    "entry",
    [
        {"db_host": "h", "db_user": "noetl", "db_password": "noetl", "db_name": "noetl"},
        {"dsn": "postgresql://noetl:noetl@db:5432/noetl"},
        {"conninfo": "host=db user=noetl password=noetl dbname=noetl"},
        {"type": "postgres", "data": {"user": "noetl", "password": "noetl", "host": "db"}},
    ],
)
def test_a_password_equal_to_its_own_user_name_does_not_blank_the_name(
    entry: dict[str, Any],
) -> None:
    store = CredentialStore({"pg": entry, "other": {"db_password": "Other-Pw-3344"}})
    assert store.secret_values() == {"Other-Pw-3344"}
    redactor = Redactor.from_store(store)
    text = 'FATAL: database "noetl" does not exist for user "noetl"'
    assert redactor.redact(text) == text
    # where it stands as a password it is still masked
    assert redactor.redact("password=noetl") == "password=***"
    assert redactor.redact("postgresql://noetl:noetl@db/noetl") == "postgresql://noetl:***@db/noetl"


def test_the_password_is_masked_and_the_names_beside_it_are_not() -> None:
    store = CredentialStore(
        {
            "pg_secret_store": {
                "db_host": "10.1.2.3",
                "db_port": "6543",
                "db_user": "etl",
                "db_password": "Etl-Pw-5566",
                "db_name": "warehouse",
            }
        }
    )
    text = 'etl@10.1.2.3:6543/warehouse: database "warehouse" does not exist (pw Etl-Pw-5566)'
    assert Redactor.from_store(store).redact(text) == (
        'etl@10.1.2.3:6543/warehouse: database "warehouse" does not exist (pw ***)'
    )


# ---- a command's keychain masks (tools.redaction.CommandMasks) ----------------------------------


def test_command_masks_apply_inside_the_command_only(services: Any) -> None:
    base = services.redactor
    assert mask_command_value({"t": "kc-value-1"}) == {"t": "kc-value-1"}
    with command_masks() as masks:
        assert current_masks() is masks
        assert services.redactor.redact("kc-value-1") == "kc-value-1"  # nothing added yet
        masks.add(Redactor(["kc-value-1"]))
        masks.add(Redactor([]))  # nothing to mask: no change
        masks.add(Redactor(["kc-value-2"]))
        text = "kc-value-1 kc-value-2 password=abc"
        assert services.redactor.redact(text) == "*** *** password=***"
        assert mask_command_value({"t": ["kc-value-2"], "n": 1}) == {"t": ["***"], "n": 1}
        seen: list[str] = []
        context = contextvars.copy_context()  # what a python step's timeout thread gets
        thread = threading.Thread(
            target=lambda: seen.append(context.run(lambda: services.redactor.redact("kc-value-2")))
        )
        thread.start()
        thread.join()
        assert seen == ["***"]
    assert current_masks() is None
    assert services.redactor.redact("kc-value-1") == "kc-value-1"
    assert services.redactor.secret_count == base.secret_count
