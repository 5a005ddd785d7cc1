"""The shared HTTP client keeps no cookies (imported with httpx, only when a command
sends a request: `http.cookiejar` pulls in `urllib.request`)."""

from __future__ import annotations

from http.cookiejar import Cookie, CookieJar, DefaultCookiePolicy
from typing import Any


class _NoCookies(DefaultCookiePolicy):
    """Each request stands alone, as NoETL's do (a client per request there): a cookie
    a response set is never kept, so it cannot ride along on a later request of another
    execution through the worker's shared client. A playbook that needs a cookie sends
    its `Cookie` header."""

    def set_ok(self, cookie: Cookie, request: Any) -> bool:
        return False

    def return_ok(self, cookie: Cookie, request: Any) -> bool:
        return False


def no_cookies() -> CookieJar:
    return CookieJar(policy=_NoCookies())
