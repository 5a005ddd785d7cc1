"""models.keychain: reading the declarations, and what an execution start refuses."""

from __future__ import annotations

import pytest

from noetl_celery.models.keychain import KeychainInvalid, check_startable, parse_keychain


def test_entries_in_order_with_scopes_and_aliases() -> None:
    entries = parse_keychain(
        [
            {"name": "a", "kind": "bearer", "token": "t"},
            {"name": "b", "type": "static", "scope": "execution", "map": {"k": "v"}},
            {"name": "c", "kind": "credential", "scope": "local", "credential": "alias"},
            {"name": "d", "kind": "credential_ref", "ref": "other", "scope": "shared"},
            {"name": "e", "kind": "credential"},
        ]
    )
    assert [(e.name, e.kind, e.scope) for e in entries] == [
        ("a", "bearer", "global"),
        ("b", "static", "execution"),
        ("c", "credential", "execution"),
        ("d", "credential_ref", "global"),
        ("e", "credential", "global"),
    ]
    assert [e.credential_alias for e in entries[2:]] == ["alias", "other", "e"]
    assert parse_keychain(None) == [] and parse_keychain([]) == []


@pytest.mark.parametrize(
    ("section", "said"),
    [
        ("nope", "`keychain` must be a list of entries"),
        (["x"], "keychain entry #1 must be a mapping with `name` and `kind`"),
        ([{"name": "a"}], "keychain entry 'a' needs a `kind`: one of bearer, credential,"),
        ([{"name": "a", "kind": "bearer"}], "keychain entry 'a' (kind bearer) needs the `token:`"),
        (
            [{"name": "a", "kind": "static", "map": "k=v"}],
            "keychain entry 'a': `map` must be a mapping",
        ),
        (
            [{"name": "a", "kind": "oauth2", "endpoint": "http://x", "data": ["grant"]}],
            "keychain entry 'a': `data` must be a mapping",
        ),
    ],
)
def test_malformed_sections(section: object, said: str) -> None:
    with pytest.raises(KeychainInvalid) as caught:
        parse_keychain(section)
    assert said in str(caught.value)


@pytest.mark.parametrize(
    ("kind", "what"),
    [
        ("secret_manager", "a cloud secret manager (GCP/AWS)"),
        ("google_id_token", "Google ID tokens"),
        ("google_service_account", "Google service-account tokens"),
    ],
)
def test_cloud_kinds_refuse_the_start(kind: str, what: str) -> None:
    section = [{"name": "ok", "kind": "bearer", "token": "t"}, {"name": "x", "kind": kind}]
    with pytest.raises(KeychainInvalid) as caught:
        check_startable(section)
    message = str(caught.value)
    assert message.startswith(f"keychain entry 'x' (kind {kind}) is not supported here")
    assert what in message and "NOETL_CREDENTIALS_FILE" in message
    assert [e.name for e in check_startable(section[:1])] == ["ok"]
