"""The executions pages in a real headless Chromium: inside Flower (behind its basic
auth, with real workers) and under `serve`. Progress moves without a reload (a marker
set on `window` survives), a failed item's error opens, cancel works from the page, the
schedules page pauses and triggers, Flower's navigation and task pages link to them.
Screenshots of each page go to the `screenshots` folder (conftest)."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from selenium.common.exceptions import (
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from noetl_celery.engine.service import Engine
from tests.browser.conftest import FLOWER_AUTH, FlowerServer, authorization, use_credentials
from tests.support.engines import celery_engine

pytestmark = [pytest.mark.browser, pytest.mark.integration]
PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"
MARK = "window.__noetlMarker"
T = TypeVar("T")


@pytest.fixture(scope="module")
def engine(
    distributed: dict[str, Any], credentials_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    built = celery_engine(
        distributed["url"], distributed["redis_url"], tmp_path_factory.mktemp("e"), credentials_file
    )
    yield built
    built.close()


def start(engine: Engine, playbook: str, payload: dict[str, Any]) -> str:
    return engine.start_text((PLAYBOOKS / playbook).read_text(), payload)


def stop(engine: Engine, execution_id: str) -> None:
    if engine.store.execution_status(execution_id) == "RUNNING":
        engine.cancel(execution_id)


def poll(check: Callable[[], T | None], what: str, timeout: float = 30) -> T:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (StaleElementReferenceException, NoSuchElementException, ValueError) as exc:
            last = exc  # the live refresh swapped the element: look again
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout}s (last: {last!r})")


def text(driver: Any, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text).strip()


def first_number(value: str) -> int:
    return int(value.split()[0])


def mark_window(driver: Any) -> None:
    driver.execute_script(f"{MARK} = 'still here';")


def same_window(driver: Any) -> bool:
    """The marker survives: the page was never reloaded."""
    return bool(driver.execute_script(f"return {MARK} === 'still here';"))


def refreshes(driver: Any) -> int:
    value = driver.execute_script(
        "return document.getElementById('noetl-page').dataset.refreshes || '0';"
    )
    return int(value)


def shot(driver: Any, folder: Path, name: str) -> Path:
    """A screenshot of the whole page (the window grown to the page's height)."""
    height = driver.execute_script("return document.documentElement.scrollHeight;")
    driver.set_window_size(1400, max(900, min(int(height) + 40, 4000)))
    path = folder / name
    assert driver.save_screenshot(str(path)), path
    driver.set_window_size(1400, 1000)
    return path


def loop_done(driver: Any) -> int:
    return first_number(text(driver, '.noetl-loop[data-step="each"] .loop-done'))


def watch_loop_move(driver: Any) -> None:
    """The loop's done count and its bar move while the page stays the same window."""
    before = poll(lambda: loop_done(driver) or None, "loop progress shown")
    width = driver.find_element(By.CSS_SELECTOR, ".noetl-bar-fill").get_attribute("style")
    mark_window(driver)
    poll(lambda: loop_done(driver) > before, "loop progress moving without a reload")
    poll(
        lambda: (
            driver.find_element(By.CSS_SELECTOR, ".noetl-bar-fill").get_attribute("style") != width
        ),
        "progress bar growing",
    )
    assert same_window(driver) and refreshes(driver) > 0


def test_flower_executions_list_and_page_follow_a_running_loop(
    chrome: Any, flower: FlowerServer, engine: Engine, screenshots: Path
) -> None:
    use_credentials(chrome, FLOWER_AUTH)
    execution_id = start(engine, "slow_loop.yaml", {"n": 300, "pause": 0.1})
    try:
        chrome.get(f"{flower.url}/executions")
        # Flower's own navigation, with the Executions entry active
        active = chrome.find_element(By.CSS_SELECTOR, "nav.app-navbar a.nav-link.active")
        assert active.text == "Executions"
        assert (
            chrome.find_element(By.LINK_TEXT, "Schedules")
            .get_attribute("href")
            .endswith("/schedules")
        )
        row = f'tr[data-execution="{execution_id}"]'

        def items_done() -> int:  # the slow loop's items all succeed
            return first_number(text(chrome, f"{row} .items-succeeded"))

        poll(lambda: items_done() > 0, "the running execution listed with items done")
        before = items_done()
        mark_window(chrome)
        poll(lambda: items_done() > before, "items done moving in the list without a reload")
        assert same_window(chrome) and refreshes(chrome) > 0
        assert text(chrome, f"{row} .noetl-badge") == "RUNNING"
        shot(chrome, screenshots, "flower-executions.png")

        chrome.find_element(By.CSS_SELECTOR, f"{row} a.noetl-execution").click()
        poll(lambda: chrome.current_url.endswith(f"/executions/{execution_id}"), "detail page")
        watch_loop_move(chrome)
        # the graph: each step drawn, coloured by its state
        nodes = {
            n.get_attribute("data-step"): n.get_attribute("data-status")
            for n in chrome.find_elements(By.CSS_SELECTOR, "#step-graph .noetl-node")
        }
        assert nodes["start"] == "completed" and nodes["each"] == "running"
        assert nodes["end"] == "pending"
        assert len(chrome.find_elements(By.CSS_SELECTOR, "#step-graph path.noetl-edge")) == 2
        poll(lambda: text(chrome, ".noetl-loop .loop-rate").endswith("/s"), "a rate")
        poll(lambda: text(chrome, ".noetl-loop .loop-eta"), "an ETA")
        poll(lambda: "item " in text(chrome, "#logs"), "the items' printed lines in the logs")
        shot(chrome, screenshots, "flower-execution-running.png")
    finally:
        stop(engine, execution_id)


def test_flower_failed_item_error_opens(
    chrome: Any, flower: FlowerServer, engine: Engine, screenshots: Path
) -> None:
    use_credentials(chrome, FLOWER_AUTH)
    execution_id = start(engine, "some_items_fail.yaml", {"n": 40})
    assert engine.wait(execution_id, 90).status == "FAILED"
    chrome.get(f"{flower.url}/executions/{execution_id}")
    assert text(chrome, "#execution-status") == "FAILED"
    assert text(chrome, '.noetl-loop[data-step="each"] .loop-failed') == "8"
    item = chrome.find_element(By.ID, "failed-each-1-3")
    error = item.find_element(By.CSS_SELECTOR, "pre.noetl-error-text")
    assert item.get_attribute("open") is None and not error.is_displayed()
    item.find_element(By.TAG_NAME, "summary").click()
    assert error.is_displayed()
    assert "item 3 is not wanted here" in error.text
    assert "ValueError" in item.text
    assert len(chrome.find_elements(By.CSS_SELECTOR, "details.noetl-failed-item")) == 8
    assert chrome.find_element(By.ID, "rerun-failed-button").is_displayed()
    shot(chrome, screenshots, "flower-execution-failed.png")


def press(element: Any) -> None:
    """Press `element` from the keyboard (Space: a checkbox toggles, a button submits
    its form as its own submitter). Rows low on the page: after the session's earlier
    screenshots resized the window, chromedriver's click points there come out stale."""
    element.send_keys(Keys.SPACE)


def test_flower_redrive_two_checked_quarantined_items(
    chrome: Any, flower: FlowerServer, engine: Engine, screenshots: Path, tmp_path: Path
) -> None:
    """Two of the quarantined items checked, redriven in one POST (Flower's form, with
    its `_xsrf` field): the page opens the new execution, which ran exactly those two
    (the fix is in place now), and the original's rows link to it."""
    use_credentials(chrome, FLOWER_AUTH)
    fix = tmp_path / "fixed"
    execution_id = start(engine, "quarantine_fixable.yaml", {"fix": str(fix)})
    assert engine.wait(execution_id, 90).status == "COMPLETED"
    chrome.get(f"{flower.url}/executions/{execution_id}")
    assert text(chrome, '.noetl-loop[data-step="each"] .loop-quarantined') == "3"
    rows = chrome.find_elements(By.CSS_SELECTOR, "tr.noetl-quarantined")
    assert [r.get_attribute("data-item") for r in rows] == [
        "each:1:2",
        "each:1:5",
        "each:1:8",
        "other:1:0",
        "other:1:1",
    ]
    fix.write_text("fixed")
    for item in ("each:1:2", "each:1:8"):
        box = chrome.find_element(By.CSS_SELECTOR, f'input[name="item"][value="{item}"]')
        press(box)
        assert box.is_selected()
    press(chrome.find_element(By.ID, "redrive-checked-button"))
    here = f"/executions/{execution_id}"
    poll(
        lambda: "/executions/" in chrome.current_url and not chrome.current_url.endswith(here),
        "the redrive's page opened",
    )
    new_id = chrome.current_url.rstrip("/").rsplit("/", 1)[1]
    poll(lambda: text(chrome, "#execution-status") == "COMPLETED", "the redrive done", 90)
    assert execution_id in text(chrome, ".noetl-summary")  # "rerun of <original>"
    poll(lambda: text(chrome, '.noetl-loop[data-step="each"] .loop-succeeded') == "2", "2 ran")
    assert text(chrome, '.noetl-loop[data-step="each"] .loop-done').startswith("2 / 2")
    assert not chrome.find_elements(By.CSS_SELECTOR, '.noetl-loop[data-step="other"]')
    ran = engine.events(new_id, types=["command.completed"], step="each")
    assert sorted(int(e["payload"]["result"]["data"]) for e in ran) == [2, 8]
    shot(chrome, screenshots, "flower-execution-redriven.png")
    chrome.get(f"{flower.url}{here}")
    links = chrome.find_elements(By.CSS_SELECTOR, "a.noetl-redriven-by")
    assert len(links) == 2 and all(a.get_attribute("href").endswith(new_id) for a in links)
    assert not chrome.find_element(By.CSS_SELECTOR, 'input[value="each:1:2"]').is_enabled()
    assert chrome.find_element(By.CSS_SELECTOR, 'input[value="each:1:5"]').is_enabled()
    shot(chrome, screenshots, "flower-execution-quarantined.png")


def test_flower_cancel_from_the_page(
    chrome: Any, flower: FlowerServer, engine: Engine, screenshots: Path
) -> None:
    use_credentials(chrome, FLOWER_AUTH)
    execution_id = start(engine, "slow_loop.yaml", {"n": 300, "pause": 0.2})
    try:
        chrome.get(f"{flower.url}/executions/{execution_id}")
        poll(lambda: loop_done(chrome) > 0, "the loop running")

        def press_cancel() -> bool:  # the live refresh may swap the button meanwhile
            chrome.find_element(By.ID, "cancel-button").click()
            return True

        poll(press_cancel, "the cancel button pressed")
        chrome.switch_to.alert.accept()  # "Cancel this execution and its children?"
        poll(lambda: text(chrome, "#execution-status") == "CANCELLED", "CANCELLED on the page")
        assert engine.store.execution_status(execution_id) == "CANCELLED"
        poll(lambda: not chrome.find_elements(By.ID, "cancel-button"), "cancel button gone")
        node = '#step-graph .noetl-node[data-step="each"]'
        assert chrome.find_element(By.CSS_SELECTOR, node).get_attribute("data-status") == "stopped"
        assert text(chrome, '.noetl-loop[data-step="each"] .loop-eta') == ""
        assert chrome.find_element(By.ID, "rerun-button").is_displayed()
        shot(chrome, screenshots, "flower-execution-cancelled.png")
    finally:
        stop(engine, execution_id)


def test_flower_schedules_pause_resume_trigger(
    chrome: Any, flower: FlowerServer, engine: Engine, screenshots: Path
) -> None:
    use_credentials(chrome, FLOWER_AUTH)
    engine.register_text((PLAYBOOKS / "slow_loop.yaml").read_text())
    schedule = engine.schedules.add(
        "tests/slow_loop", "0 3 * * *", name="nightly", payload={"n": 3, "pause": 0}
    )
    row = f'tr[data-schedule="{schedule.schedule_id}"]'
    try:
        chrome.get(f"{flower.url}/schedules")
        assert "active" in text(chrome, row)
        chrome.find_element(By.CSS_SELECTOR, f"{row} button").click()  # Pause
        poll(lambda: "paused" in text(chrome, row), "the schedule paused")
        assert not engine.schedules.get(schedule.schedule_id).enabled
        shot(chrome, screenshots, "flower-schedules.png")
        chrome.find_element(By.CSS_SELECTOR, f"{row} button").click()  # Resume
        poll(lambda: "active" in text(chrome, row), "the schedule resumed")
        buttons = chrome.find_elements(By.CSS_SELECTOR, f"{row} button")
        buttons[1].click()  # Trigger now: opens the run it started
        poll(lambda: "/executions/" in chrome.current_url, "the triggered run's page")
        poll(lambda: text(chrome, "#execution-status") == "COMPLETED", "the triggered run done", 60)
        assert "schedule" in text(chrome, ".noetl-summary")
    finally:  # the session's other tests list schedules: leave none behind
        engine.schedules.remove(schedule.schedule_id)


def flower_api(flower: FlowerServer, path: str) -> Any:
    request = urllib.request.Request(f"{flower.url}{path}")
    request.add_header("Authorization", authorization(FLOWER_AUTH))
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def test_flower_task_pages_link_to_their_execution(
    chrome: Any, flower: FlowerServer, engine: Engine, screenshots: Path
) -> None:
    use_credentials(chrome, FLOWER_AUTH)

    def shown_task() -> tuple[str, str] | None:
        # workers send task events once Flower's broadcast reached them: run until one
        # of the run's commands is in Flower's task list
        execution_id = start(engine, "slow_loop.yaml", {"n": 6, "pause": 0})
        engine.wait(execution_id, 60)
        for _ in range(10):
            tasks = flower_api(flower, "/api/tasks?taskname=noetl.execute_command") or {}
            for uuid, task in tasks.items():
                if f"execution={execution_id}" in str(task.get("args")):
                    return uuid, execution_id
            time.sleep(0.5)
        return None

    uuid, execution_id = poll(shown_task, "an engine task shown by flower", 90)
    chrome.get(f"{flower.url}/task/{uuid}")
    link = chrome.find_element(By.ID, "noetl-execution-link")
    assert link.get_attribute("href").endswith(f"/executions/{execution_id}")
    chrome.get(f"{flower.url}/tasks")
    poll(
        lambda: chrome.find_elements(By.CSS_SELECTOR, "#tasks-table a.noetl-execution-link"),
        "execution links in flower's task list",
    )
    shot(chrome, screenshots, "flower-tasks.png")
    chrome.find_element(By.CSS_SELECTOR, "#tasks-table a.noetl-execution-link").click()
    poll(lambda: "/executions/" in chrome.current_url, "an execution opened from a task row")
    assert chrome.find_element(By.ID, "execution-status")


def test_serve_pages_list_and_detail(
    chrome: Any, distributed: dict[str, Any], engine: Engine, screenshots: Path
) -> None:
    import httpx

    from tests.support.server import serving

    login = "ops:serve-pass"
    use_credentials(chrome, login)
    execution_id = start(engine, "slow_loop.yaml", {"n": 200, "pause": 0.1})
    try:
        with serving({**distributed["env"], "NOETL_API_BASIC_AUTH": login}) as server:
            assert httpx.get(f"{server.url}/executions").status_code == 401
            chrome.get(f"{server.url}/")
            assert chrome.current_url.endswith("/executions")
            assert text(chrome, "nav.noetl-nav a.active") == "Executions"
            poll(
                lambda: chrome.find_elements(
                    By.CSS_SELECTOR, f'tr[data-execution="{execution_id}"]'
                ),
                "the execution listed",
            )
            shot(chrome, screenshots, "serve-executions.png")
            chrome.get(f"{server.url}/executions/{execution_id}")
            watch_loop_move(chrome)
            shot(chrome, screenshots, "serve-execution.png")
    finally:
        stop(engine, execution_id)


def test_flower_pages_need_the_login_and_same_origin_posts(
    flower: FlowerServer, engine: Engine
) -> None:
    import httpx

    auth = {"Authorization": authorization(FLOWER_AUTH)}
    wrong = {"Authorization": authorization("admin:wrong")}
    for path in ("/executions", "/schedules", "/executions/1", "/executions/of-tasks?ids=x"):
        assert httpx.get(f"{flower.url}{path}").status_code == 401, path
        assert httpx.get(f"{flower.url}{path}", headers=wrong).status_code == 401, path
    assert httpx.get(f"{flower.url}/executions", headers=auth).status_code == 200
    assert httpx.get(f"{flower.url}/pages-static/pages.js").status_code == 200  # like /static
    execution_id = start(engine, "slow_loop.yaml", {"n": 100, "pause": 0.1})
    try:
        cancel = f"{flower.url}/executions/{execution_id}/cancel"
        assert httpx.post(cancel).status_code == 401
        for headers in (
            {},  # no Origin, no Referer, no fetch metadata: refused by the pages' guard
            {"Origin": "http://evil.example"},  # refused by Flower's own check first
            {"Sec-Fetch-Site": "cross-site"},
        ):
            answer = httpx.post(cancel, headers={**auth, **headers}, follow_redirects=False)
            assert answer.status_code == 403, headers
        assert engine.store.execution_status(execution_id) == "RUNNING"
        answer = httpx.post(cancel, headers={**auth, "Origin": flower.url}, follow_redirects=False)
        assert answer.status_code == 303
        assert answer.headers["location"] == f"/executions/{execution_id}"
        assert engine.store.execution_status(execution_id) == "CANCELLED"
    finally:
        stop(engine, execution_id)


def test_flower_url_prefix_reaches_the_pages_links(
    distributed: dict[str, Any], engine: Engine, tmp_path: Path
) -> None:
    import httpx

    execution_id = start(engine, "slow_loop.yaml", {"n": 2, "pause": 0})
    engine.wait(execution_id, 60)
    server = FlowerServer(distributed["env"], tmp_path / "flower.log", ("--url_prefix=ops",))
    try:
        server.wait_ready()
        auth = {"Authorization": authorization(FLOWER_AUTH)}
        listing = httpx.get(f"{server.url}/ops/executions", headers=auth)
        assert listing.status_code == 200
        assert f'href="/ops/executions/{execution_id}"' in listing.text
        assert 'href="/ops/executions"' in listing.text  # the navigation entry
        assert 'src="/ops/pages-static/pages.js"' in listing.text
        detail = httpx.get(f"{server.url}/ops/executions/{execution_id}", headers=auth)
        assert detail.status_code == 200 and 'action="/ops/executions/' in detail.text
        assert httpx.get(f"{server.url}/ops/pages-static/pages.css").status_code == 200
    finally:
        server.stop()
