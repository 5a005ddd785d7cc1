"""Browser tests: a real headless Chromium (Debian's `chromium` and `chromium-driver`)
driven by Selenium, against real workers and a real `noetl-celery flower` / `serve`.
A missing browser or driver fails the run (`.ci/run` installs them): never a skip.

Screenshots go to `$NOETL_TEST_ARTIFACTS/screenshots/` (default
`build/test-artifacts/screenshots/`), one stable name per page and state.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.private_services import free_port

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ROOT = Path(__file__).resolve().parents[2]
FLOWER_AUTH = "admin:browser-test-pass"


@pytest.fixture(scope="session")
def screenshots() -> Path:
    base = os.environ.get("NOETL_TEST_ARTIFACTS")
    folder = (
        Path(base) / "screenshots" if base else ROOT / "build" / "test-artifacts" / "screenshots"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def authorization(credentials: str) -> str:
    return "Basic " + base64.b64encode(credentials.encode()).decode()


CHROME_ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--window-size=1400,1000",
    "--disable-extensions",
    # the machine's network is closed: no background connections to fail
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def chrome_driver(
    extra_args: tuple[str, ...] = (), capabilities: dict[str, Any] | None = None
) -> Any:
    """A headless Chromium (Debian's, through chromium-driver) with the network domain on;
    `extra_args` and `capabilities` for a test that needs more (host rules, logs)."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(
            f"browser tests need {', '.join(missing)}: apt-get install chromium chromium-driver "
            "(.ci/run installs them)",
            pytrace=False,
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (*CHROME_ARGS, *extra_args):
        options.add_argument(arg)
    for name, value in (capabilities or {}).items():
        options.set_capability(name, value)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    driver.execute_cdp_cmd("Network.enable", {})
    return driver


@pytest.fixture(scope="session")
def chrome() -> Iterator[Any]:
    """One headless Chromium for the session (pages are opened in turn)."""
    driver = chrome_driver()
    try:
        yield driver
    finally:
        driver.quit()


def use_credentials(driver: Any, credentials: str | None) -> None:
    """Send basic credentials with every request of the page, fetches included (the
    DevTools protocol: no credentials in URLs, which fetch() refuses)."""
    headers = {"Authorization": authorization(credentials)} if credentials else {}
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": headers})


class FlowerServer:
    """`noetl-celery flower --basic-auth` on a free loopback port."""

    def __init__(self, env: dict[str, str], log: Path, extra: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        prefix = next((a.split("=", 1)[1] for a in extra if a.startswith("--url_prefix=")), "")
        self.health = (f"/{prefix.strip('/')}" if prefix else "") + "/healthcheck"
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "noetl_celery.cli.main",
                    "flower",
                    "--port",
                    str(self.port),
                    "--basic-auth",
                    FLOWER_AUTH,
                    *extra,
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"flower exited: {self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}{self.health}", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                time.sleep(0.2)
        raise RuntimeError(f"flower not answering after {timeout}s: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


@pytest.fixture(scope="module")
def flower(
    distributed: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FlowerServer]:
    server = FlowerServer(distributed["env"], tmp_path_factory.mktemp("flower") / "flower.log")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
