from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from noetl_celery.errors import ConfigurationError, CredentialError
from noetl_celery.tools.credentials import CredentialStore

PG = {
    "db_host": "db.example",
    "db_port": "6543",
    "db_user": "app",
    "db_password": "Pw-4411-x",
    "db_name": "appdb",
}


def _conninfo(store: CredentialStore, alias: str) -> dict[str, str]:
    return {
        k: str(v) for k, v in conninfo_to_dict(store.resolve(alias).postgres_conninfo()).items()
    }


def test_noetl_payload_shape_with_string_port() -> None:
    info = _conninfo(CredentialStore({"pg": PG}), "pg")
    assert info == {
        "host": "db.example",
        "port": "6543",
        "user": "app",
        "password": "Pw-4411-x",
        "dbname": "appdb",
    }


def test_noetl_record_shape_and_int_port() -> None:
    store = CredentialStore({"pg": {"type": "postgres", "data": {**PG, "db_port": 5432}}})
    assert store.resolve("pg").type == "postgres"
    assert _conninfo(store, "pg")["port"] == "5432"


@pytest.mark.parametrize("field", ["dsn", "url"])
def test_dsn_and_url_shapes_strip_driver_suffix(field: str) -> None:
    store = CredentialStore({"pg": {field: "postgresql+psycopg://u:p%40ss@h:5433/d"}})
    info = _conninfo(store, "pg")
    assert info["host"] == "h" and info["port"] == "5433" and info["dbname"] == "d"
    assert info["password"] == "p@ss"


def test_list_shape_and_single_record_file(tmp_path: Path) -> None:
    store = CredentialStore(
        [
            {"name": "a", "type": "postgres", "data": PG},
            {"name": "b", "data": {"dsn": "postgresql://x@y/z"}},
        ]
    )
    assert store.aliases() == ["a", "b"]
    assert "a" in store and len(store) == 2
    # NoETL fixture files hold exactly one record
    file = tmp_path / "pg_local.json"
    file.write_text(json.dumps({"name": "pg_local", "type": "postgres", "data": PG}))
    assert CredentialStore.from_file(file).aliases() == ["pg_local"]


def test_yaml_file(tmp_path: Path) -> None:
    file = tmp_path / "creds.yaml"
    file.write_text(
        "pg:\n  db_host: h\n  db_port: '5432'\n  db_user: u\n  db_password: s3cret-yaml\n"
        "  db_name: d\n"
    )
    store = CredentialStore.from_file(file)
    assert _conninfo(store, "pg")["password"] == "s3cret-yaml"
    assert "s3cret-yaml" in store.secret_values()


def test_empty_store() -> None:
    store = CredentialStore.empty()
    assert store.aliases() == []
    with pytest.raises(CredentialError, match="known aliases: none") as info:
        store.resolve("pg")
    # no file at all: say where the file must be named (the workers resolve `auth:`)
    assert "set NOETL_CREDENTIALS_FILE in the environment of the workers" in str(info.value)


def test_an_empty_credentials_file_gets_no_hint_about_the_variable(tmp_path: Path) -> None:
    file = tmp_path / "credentials.json"
    file.write_text("{}")
    with pytest.raises(CredentialError) as info:
        CredentialStore.from_file(file).resolve("pg")
    assert "known aliases: none" in str(info.value)
    assert "NOETL_CREDENTIALS_FILE" not in str(info.value)


def test_unknown_alias_lists_aliases_but_no_values() -> None:
    store = CredentialStore({"pg_a": PG, "pg_b": PG})
    with pytest.raises(CredentialError) as info:
        store.resolve("pg_missing")
    text = str(info.value)
    assert "pg_missing" in text and "pg_a, pg_b" in text
    assert "Pw-4411-x" not in text and "db.example" not in text


def test_credential_repr_hides_data() -> None:
    assert "Pw-4411-x" not in repr(CredentialStore({"pg": PG}).resolve("pg"))


def test_no_connection_fields_is_a_credential_error() -> None:
    store = CredentialStore({"api": {"api_token": "abc-token-1"}})
    with pytest.raises(CredentialError, match="'api' has no postgres connection fields"):
        store.resolve("api").postgres_conninfo()


def test_conninfo_is_built_once_per_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    import psycopg.conninfo

    built: list[object] = []
    real = psycopg.conninfo.make_conninfo

    def counting(*args: Any, **kwargs: Any) -> str:
        built.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(psycopg.conninfo, "make_conninfo", counting)
    credential = CredentialStore({"pg": PG}).resolve("pg")
    first = credential.postgres_conninfo()
    assert all(credential.postgres_conninfo() == first for _ in range(5))
    assert len(built) == 1  # every postgres tool call asks: built on the first ask only
    # a store read again (a rotated file) has new credentials, built afresh
    assert CredentialStore({"pg": PG}).resolve("pg").postgres_conninfo() == first
    assert len(built) == 2


def test_a_credential_error_is_raised_on_every_ask() -> None:
    credential = CredentialStore({"api": {"api_token": "abc-token-1"}}).resolve("api")
    for _ in range(2):
        with pytest.raises(CredentialError, match="no postgres connection fields"):
            credential.postgres_conninfo()


def test_invalid_dsn_error_does_not_quote_it() -> None:
    store = CredentialStore({"pg": {"dsn": "host=h password='Bad-Pw-0099 oops"}})
    with pytest.raises(CredentialError) as info:
        store.resolve("pg").postgres_conninfo()
    assert "Bad-Pw-0099" not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_missing_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigurationError, match=r"nope\.yaml"):
        CredentialStore.from_file(missing)


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("bad.yaml", 'pg:\n  db_password: "Leaky-Pw-7733\n  x: [', "invalid YAML at line"),
        ("bad.json", '{"pg": {"db_password": "Leaky-Pw-7733",}', "invalid JSON at line"),
        ("list.yaml", "- db_password: Leaky-Pw-7733\n", "needs a `name`"),
        ("scalar.yaml", "just a string Leaky-Pw-7733\n", "expected a mapping or a list"),
        ("entry.yaml", "pg: Leaky-Pw-7733\n", "credential 'pg' must be a mapping"),
        (
            "bomb.yaml",
            "pg: {db_password: Leaky-Pw-7733}\na: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n"
                for p, n in zip("abcdefgh", "bcdefghi", strict=True)
            ),
            "(line 6): YAML aliases (*name) expand this document past the limit of 100,000",
        ),
        ("deep.yaml", "pg: " + "[" * 200 + "]" * 200, "YAML nested deeper than the limit"),
        ("deep.json", '{"pg": ' + "[" * 100_000 + "]" * 100_000 + "}", "JSON nested too deep"),
    ],
)
def test_malformed_file_names_it_without_secrets(
    tmp_path: Path, name: str, text: str, expected: str
) -> None:
    file = tmp_path / name
    file.write_text(text)
    with pytest.raises(ConfigurationError) as info:
        CredentialStore.from_file(file)
    message = str(info.value)
    assert name in message and expected in message
    assert "Leaky-Pw-7733" not in message


def test_secret_values_cover_fields_and_dsn_passwords() -> None:
    store = CredentialStore(
        {
            "a": PG,
            "b": {"dsn": "postgresql://u:Dsn-Pw-1234@h/d"},
            "c": {
                "type": "api",
                "data": {
                    "client_secret": "cs-998877",
                    "api_key": "k-556677",
                    "bearer_token": "t-112233",
                    "user": "not-secret",
                },
            },
            "d": {"conninfo": "host=h password=Kv-Pw-5566 dbname=d"},
        }
    )
    secrets = store.secret_values()
    for value in ("Pw-4411-x", "Dsn-Pw-1234", "cs-998877", "k-556677", "t-112233", "Kv-Pw-5566"):
        assert value in secrets
    assert "not-secret" not in secrets and "db.example" not in secrets
