"""models.keychain: reading the declarations, and what an execution start refuses."""

from __future__ import annotations

import pytest

from noetl_celery.models.keychain import (
    KeychainInvalid,
    check_startable,
    entry_problems,
    parse_keychain,
)


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


@pytest.mark.parametrize(
    ("entry", "named", "backend"),
    [
        (
            {"kind": "secrets", "provider": "gcp", "map": {"k": "projects/p/secrets/k"}},
            "(kind secrets, provider gcp)",
            "Google Secret Manager (`provider: gcp`)",
        ),
        ({"provider": "aws", "map": {"k": "arn"}}, "(provider aws)", "AWS Secrets Manager"),
        ({"kind": "secret_manager", "provider": "azure"}, "provider azure", "Azure Key Vault"),
        ({"provider": "vault", "region": "eu"}, "(provider vault)", "HashiCorp Vault"),
        ({"kind": "static", "provider": "k8s", "map": {"a": "b"}}, "provider k8s", "Kubernetes"),
        ({"kind": "bearer", "provider": "onprem", "token": "t"}, "provider onprem", "a secret"),
    ],
)
def test_a_provider_refuses_the_start_naming_it(
    entry: dict[str, object], named: str, backend: str
) -> None:
    section = [{"name": "ok", "kind": "bearer", "token": "t"}, {"name": "x", **entry}]
    assert entry_problems(1, section[1]) == []  # usable to validation (a warning there)
    with pytest.raises(KeychainInvalid) as caught:
        check_startable(section)
    message = str(caught.value)
    assert message.startswith("keychain entry 'x' (") and named in message
    assert "is not supported here: noetl-celery does not reach secrets from" in message
    assert backend in message
    assert "kinds that work here: bearer, credential, credential_ref, oauth2, static" in message


@pytest.mark.parametrize("provider", ["", 3, ["gcp"]])
def test_a_provider_that_is_no_name_is_a_problem(provider: object) -> None:
    [(field, message)] = entry_problems(0, {"name": "x", "provider": provider})
    assert field == "provider" and "`provider` must be a name" in message
