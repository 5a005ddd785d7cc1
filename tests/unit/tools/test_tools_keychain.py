"""tools.keychain: every kind resolved against real services (a local OAuth token
endpoint, a credential store), scopes, refresh before expiry, and errors that name the
entry without quoting a value."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from noetl_celery.settings import Settings
from noetl_celery.tools.credentials import CredentialStore
from noetl_celery.tools.keychain import REFRESH_MARGIN_SECONDS, Keychain, KeychainError
from noetl_celery.tools.redaction import MASK
from noetl_celery.tools.services import ToolServices
from tests.support.token_server import (
    CLIENT_ID,
    CLIENT_SECRET,
    TOKEN_PREFIX,
    TokenServer,
    token_server,
)

API_KEY = "kc-api-key-9b21e4"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def tokens() -> Iterator[TokenServer]:
    with token_server() as server:
        yield server


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def keychain(tmp_path: Any, clock: Clock, tokens: TokenServer) -> Iterator[Keychain]:
    store = CredentialStore(
        {
            "vendor_api": {"type": "api", "data": {"api_key": API_KEY, "host": "api.example"}},
            "oauth_client": {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET},
            "gcp_sa": {"type": "google_service_account", "data": {"private_key": "pk"}},
        }
    )
    services = ToolServices(Settings(home=tmp_path), store)
    tokens.reset()
    yield Keychain(services.http_client, lambda: store, clock)
    services.close()


def oauth(tokens: TokenServer, name: str = "tok", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "oauth2",
        "endpoint": "{{ token_url }}",
        "headers": {"Content-Type": "application/x-www-form-urlencoded"},
        "data": {
            "grant_type": "client_credentials",
            "client_id": "{{ keychain.client.client_id }}",
            "client_secret": "{{ keychain.client.client_secret }}",
        },
        **extra,
    }


CLIENT = {"name": "client", "kind": "credential", "credential": "oauth_client"}


def resolve(
    keychain: Keychain, section: list[Any], execution_id: str = "e1", **context: Any
) -> tuple[dict[str, Any], Any]:
    return keychain.resolve(section, playbook="pb", execution_id=execution_id, context=context)


# ---- the kinds ---------------------------------------------------------------------------------


def test_static_renders_its_map_from_the_workload(keychain: Keychain) -> None:
    section = [{"name": "s", "kind": "static", "map": {"api_key": "{{ key }}", "n": 3}}]
    resolved, redactor = resolve(keychain, section, key="static-secret-1")
    assert resolved == {"s": {"api_key": "static-secret-1", "n": 3}}
    assert redactor.redact("got static-secret-1") == f"got {MASK}"


def test_bearer_gives_an_access_token(keychain: Keychain) -> None:
    section = [{"name": "b", "kind": "bearer", "scope": "global", "token": "{{ t }}"}]
    resolved, redactor = resolve(keychain, section, t="bearer-secret-77")
    assert resolved == {"b": {"access_token": "bearer-secret-77", "token_type": "Bearer"}}
    assert redactor.redact("Bearer bearer-secret-77") == f"Bearer {MASK}"  # not the word


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "v", "kind": "credential", "credential": "vendor_api"},
        {"name": "v", "kind": "credential_ref", "ref": "{{ alias }}"},
        {"name": "vendor_api", "kind": "credential"},  # NoETL: the name is the alias
    ],
)
def test_credential_kinds_read_the_credentials_file(keychain: Keychain, entry: Any) -> None:
    resolved, redactor = resolve(keychain, [entry], alias="vendor_api")
    assert resolved[entry["name"]] == {"api_key": API_KEY, "host": "api.example"}
    # masked as the credentials file masks it: secret-named fields
    assert redactor.redact(f"{API_KEY} at api.example") == f"{MASK} at api.example"


def test_oauth2_client_credentials_from_an_earlier_entry(
    keychain: Keychain, tokens: TokenServer
) -> None:
    resolved, redactor = resolve(keychain, [CLIENT, oauth(tokens)], token_url=tokens.token_url)
    token = resolved["tok"]
    assert token["access_token"].startswith(TOKEN_PREFIX)
    assert token["token_type"] == "Bearer" and token["expires_in"] == 3600
    assert tokens.requests == {CLIENT_ID: 1}
    text = f"{token['access_token']} {CLIENT_SECRET} {CLIENT_ID} Bearer read"
    assert redactor.redact(text) == f"{MASK} {MASK} {CLIENT_ID} Bearer read"


# ---- scopes and refresh ------------------------------------------------------------------------


def test_global_scope_is_fetched_once_for_all_executions(
    keychain: Keychain, tokens: TokenServer
) -> None:
    section = [CLIENT, oauth(tokens)]
    first = [resolve(keychain, section, f"e{i}", token_url=tokens.token_url) for i in range(5)]
    assert tokens.requests == {CLIENT_ID: 1}
    assert len({r[0]["tok"]["access_token"] for r in first}) == 1
    # another playbook with the same entry has its own
    keychain.resolve(
        section, playbook="other", execution_id="e1", context={"token_url": tokens.token_url}
    )
    assert tokens.requests == {CLIENT_ID: 2}


def test_execution_scope_is_fetched_once_per_execution(
    keychain: Keychain, tokens: TokenServer
) -> None:
    section = [CLIENT, oauth(tokens, scope="execution")]
    got = {}
    for eid in ("e1", "e2", "e1", "e2", "e3"):
        got[eid] = resolve(keychain, section, eid, token_url=tokens.token_url)[0]
    assert tokens.requests == {CLIENT_ID: 3}
    assert len({g["tok"]["access_token"] for g in got.values()}) == 3


def test_one_request_when_threads_race_for_a_token(keychain: Keychain, tokens: TokenServer) -> None:
    barrier = threading.Barrier(8)
    seen: list[str] = []

    def grab() -> None:
        barrier.wait()
        resolved, _ = resolve(keychain, [CLIENT, oauth(tokens)], token_url=tokens.token_url)
        seen.append(resolved["tok"]["access_token"])

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8 and len(set(seen)) == 1
    assert tokens.requests == {CLIENT_ID: 1}


def test_a_token_is_refreshed_before_it_expires(
    keychain: Keychain, tokens: TokenServer, clock: Clock
) -> None:
    url = f"{tokens.token_url}?expires_in=3600"
    section = [CLIENT, oauth(tokens)]
    first = resolve(keychain, section, token_url=url)[0]["tok"]["access_token"]
    # still valid with more than the margin left: the cached token
    clock.now += 3600 - REFRESH_MARGIN_SECONDS - 1
    assert resolve(keychain, section, token_url=url)[0]["tok"]["access_token"] == first
    assert tokens.requests == {CLIENT_ID: 1}
    # within the margin (not yet expired): a new one
    clock.now += 2
    second = resolve(keychain, section, token_url=url)[0]["tok"]["access_token"]
    assert second != first and tokens.requests == {CLIENT_ID: 2}


def test_a_short_lived_token_is_refreshed_at_half_its_life(
    keychain: Keychain, tokens: TokenServer, clock: Clock
) -> None:
    url = f"{tokens.token_url}?expires_in=60"
    section = [CLIENT, oauth(tokens)]
    resolve(keychain, section, token_url=url)
    clock.now += 29
    resolve(keychain, section, token_url=url)
    assert tokens.requests == {CLIENT_ID: 1}
    clock.now += 2
    resolve(keychain, section, token_url=url)
    assert tokens.requests == {CLIENT_ID: 2}


def test_static_values_are_keyed_by_what_they_render_to(keychain: Keychain) -> None:
    section = [{"name": "s", "kind": "static", "map": {"k": "{{ v }}"}}]
    assert resolve(keychain, section, v="one")[0] == {"s": {"k": "one"}}
    assert resolve(keychain, section, v="two")[0] == {"s": {"k": "two"}}


# ---- errors: the entry named, no value quoted ---------------------------------------------------


def failure(keychain: Keychain, section: list[Any], **context: Any) -> KeychainError:
    with pytest.raises(KeychainError) as caught:
        resolve(keychain, section, **context)
    return caught.value


def test_wrong_client_secret_is_an_auth_error_without_the_body(
    keychain: Keychain, tokens: TokenServer
) -> None:
    entry = oauth(tokens)
    entry["data"]["client_secret"] = "wrong-secret-31337"
    exc = failure(keychain, [CLIENT, entry], token_url=tokens.token_url)
    assert exc.kind == "auth"
    assert str(exc) == (
        f"keychain entry 'tok': token endpoint {tokens.token_url} answered HTTP 401 "
        "(invalid_client)"
    )
    assert "wrong-secret" not in str(exc)


@pytest.mark.parametrize(
    ("query", "kind", "said"),
    [
        ("status=500", "config_error", "answered HTTP 500 (server_error)"),
        ("plain=1", "config_error", "answered with no JSON object"),
    ],
)
def test_token_endpoint_failures(
    keychain: Keychain, tokens: TokenServer, query: str, kind: str, said: str
) -> None:
    url = f"{tokens.token_url}?{query}&access_token=q-secret"
    exc = failure(keychain, [CLIENT, oauth(tokens)], token_url=url)
    assert exc.kind == kind and said in str(exc)
    assert "q-secret" not in str(exc) and f"endpoint {tokens.token_url} " in str(exc)


def test_unreachable_token_endpoint(keychain: Keychain) -> None:
    from tests.support.private_services import free_port

    url = f"http://user:pw-in-url@127.0.0.1:{free_port()}/token"
    exc = failure(keychain, [CLIENT, oauth(TokenServer(url=""))], token_url=url)
    assert exc.kind == "connection"
    assert "is unreachable (ConnectError)" in str(exc) and "pw-in-url" not in str(exc)


def test_a_token_response_without_access_token(keychain: Keychain, tokens: TokenServer) -> None:
    entry = oauth(tokens)
    entry["data"]["grant_type"] = "password"
    exc = failure(keychain, [CLIENT, entry], token_url=tokens.token_url)
    assert "answered HTTP 400 (unsupported_grant_type)" in str(exc)


def test_unknown_credential_alias(keychain: Keychain) -> None:
    exc = failure(keychain, [{"name": "c", "kind": "credential", "credential": "nope"}])
    assert str(exc) == (
        "keychain entry 'c': unknown credential 'nope' "
        "(known aliases: gcp_sa, oauth_client, vendor_api)"
    )


def test_undefined_template_names_the_entry(keychain: Keychain) -> None:
    exc = failure(keychain, [{"name": "s", "kind": "static", "map": {"k": "{{ missing }}"}}])
    assert "keychain entry 's'.map.k" in str(exc) and "missing" in str(exc)


def test_cloud_kinds_are_not_supported_here(keychain: Keychain) -> None:
    section = [{"name": "sm", "kind": "secret_manager", "provider": "gcp", "map": {"k": "p"}}]
    exc = failure(keychain, section)
    assert str(exc).startswith(
        "keychain entry 'sm' (kind secret_manager, provider gcp) is not supported here"
    )


def test_a_google_credential_is_not_supported_here(keychain: Keychain) -> None:
    exc = failure(keychain, [{"name": "g", "kind": "credential", "credential": "gcp_sa"}])
    assert str(exc) == (
        "keychain entry 'g': credential 'gcp_sa' is of type google_service_account, whose "
        "Google tokens are not supported here; store the token or API key itself in the "
        "credentials file"
    )


def test_ttl_seconds_wins_over_expires_in(
    keychain: Keychain, tokens: TokenServer, clock: Clock
) -> None:
    section = [CLIENT, oauth(tokens, ttl_seconds=20)]  # the answer says 3600
    resolve(keychain, section, token_url=tokens.token_url)
    clock.now += 9
    resolve(keychain, section, token_url=tokens.token_url)
    assert tokens.requests == {CLIENT_ID: 1}
    clock.now += 2  # past half of 20 s
    resolve(keychain, section, token_url=tokens.token_url)
    assert tokens.requests == {CLIENT_ID: 2}


def test_ttl_seconds_as_a_duration_string(
    keychain: Keychain, tokens: TokenServer, clock: Clock
) -> None:
    section = [CLIENT, oauth(tokens, ttl_seconds="20s")]
    resolve(keychain, section, token_url=tokens.token_url)
    clock.now += 9
    resolve(keychain, section, token_url=tokens.token_url)
    assert tokens.requests == {CLIENT_ID: 1}
    clock.now += 2
    resolve(keychain, section, token_url=tokens.token_url)
    assert tokens.requests == {CLIENT_ID: 2}


def test_a_rotated_credential_is_seen_at_once(tmp_path: Any, tokens: TokenServer) -> None:
    stores = [CredentialStore({"c": {"api_key": "first-key-1"}})]
    services = ToolServices(Settings(home=tmp_path), stores[0])
    try:
        chain = Keychain(services.http_client, lambda: stores[-1])
        section = [{"name": "v", "kind": "credential", "credential": "c"}]
        context: dict[str, Any] = {}
        first, _ = chain.resolve(section, playbook="pb", execution_id="e", context=context)
        stores.append(CredentialStore({"c": {"api_key": "second-key-2"}}))
        second, redactor = chain.resolve(section, playbook="pb", execution_id="e", context=context)
        assert (first["v"], second["v"]) == (
            {"api_key": "first-key-1"},
            {"api_key": "second-key-2"},
        )
        assert redactor.redact("second-key-2") == MASK
    finally:
        services.close()
