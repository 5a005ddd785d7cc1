"""engine.notify's pure helpers: what an error may say about a webhook's url."""

from __future__ import annotations

import pytest

from noetl_celery.engine.notify import shown_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.slack.com/services/T0/B0/XXXXSECRET", "https://hooks.slack.com/…"),
        ("http://user:pw@127.0.0.1:8080/hook?token=abc", "http://127.0.0.1:8080/…"),
        ("https://example.com", "https://example.com/…"),
    ],
)
def test_an_error_names_only_the_receivers_host(url: str, shown: str) -> None:
    assert shown_url(url) == shown
    assert "SECRET" not in shown_url(url) and "pw" not in shown_url(url)
