"""Cross-site attacks on `serve` from a real headless Chromium, and what they changed:
nothing. An attacker's site on 127.0.0.2 auto-posts forms (text/plain bodies shaped as
JSON or YAML, url-encoded, multipart) and fires no-cors fetches at `serve` on 127.0.0.1;
a page of a rebinding name (`--host-resolver-rules` maps it to 127.0.0.1) sends
same-origin JSON; another page frames `serve`'s and Flower's pages. Real ids are the
targets (a RUNNING execution, a COMPLETED one, an active schedule) and unique catalog
paths the payloads; the engine's state is read back through the API without browser
headers, where the same requests in JSON still work (the contrast: serve is up).

Each refusal is also seen on both ends: the status Chromium received (its performance
log) and `serve`'s access log (`-v`), so the test fails if a request never left."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from selenium.webdriver.common.by import By

from tests.browser.conftest import (
    FLOWER_AUTH,
    FlowerServer,
    chrome_driver,
    use_credentials,
)
from tests.support.server import ServeProcess, serving

pytestmark = [pytest.mark.browser, pytest.mark.integration]
PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"
REBIND = "rebind.evil.example"  # mapped to serve's address: a rebinding page's name
ATTACKER = "attacker.evil.example"  # mapped to the attacker's address
REFUSED = "cross-site request refused"
UNKNOWN_HOST = f"unknown Host '{REBIND}'"
BLOCKED_FRAME = "chrome-error://chromewebdata/"
RUN = uuid.uuid4().hex[:8]  # catalog paths of this run: `attack/<RUN>/<name>`
T = TypeVar("T")


def poll(check: Callable[[], T | None], what: str, timeout: float = 20) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"no {what} within {timeout}s")


# ---- the attacker's site -----------------------------------------------------------------------
class AttackSite:
    """A plain HTTP server on 127.0.0.2 serving the pages put in `pages` (path -> HTML)."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        pages = self.pages

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                page = pages.get(self.path.split("?", 1)[0])
                data = (page or "not here").encode()
                self.send_response(200 if page is not None else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.2:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def script_data(value: Any) -> str:
    """`value` as a JavaScript literal safe inside <script>."""
    return json.dumps(value).replace("</", "<\\/")


@dataclass(frozen=True)
class Form:
    """An auto-submitting form: `fields` become hidden inputs (names and values set from
    script, so a text/plain body can be shaped at will: `name=value` CRLF)."""

    name: str
    action: str  # a full URL
    enctype: str
    fields: list[tuple[str, str]]

    def page(self) -> str:
        spec = {"action": self.action, "enctype": self.enctype, "fields": self.fields}
        return f"""<!doctype html><html><head><title>{self.name}</title></head><body>
<h1>You won a prize</h1><script>
const spec = {script_data(spec)};
const form = document.createElement("form");
form.method = "POST"; form.action = spec.action; form.enctype = spec.enctype;
for (const [name, value] of spec.fields) {{
  const input = document.createElement("input");
  input.type = "hidden"; input.name = name; input.value = value;
  form.appendChild(input);
}}
document.body.appendChild(form);
form.submit();
</script></body></html>"""


def json_form(name: str, action: str, body: str) -> Form:
    """text/plain whose body is `body` (JSON) exactly: its one `=` falls inside the
    last string value, split there into the field's name and value."""
    cut = body.rindex('"')  # the closing quote of the last string value
    return Form(name, action, "text/plain", [(body[:cut] + "pad", body[cut:])])


def yaml_form(name: str, action: str, yaml_text: str) -> Form:
    """text/plain whose body is the YAML after a comment line `#=`."""
    return Form(name, action, "text/plain", [("#", "\n" + yaml_text)])


def fetch_page(base: str, requests: list[tuple[str, str, str | None, str | None]]) -> str:
    """No-cors POSTs (label, path, body, content type), all sent at once; the page
    lists how each settled and sets its title to `done` when all have."""
    return f"""<!doctype html><html><head><title>sending</title></head><body>
<h1>Nothing to see here</h1><ol id="out"></ol><script>
const base = {script_data(base)};
const requests = {script_data(requests)};
Promise.allSettled(requests.map(([label, path, body, type]) => {{
  const init = {{method: "POST", mode: "no-cors", credentials: "include"}};
  if (body !== null) {{ init.body = body; init.headers = {{"Content-Type": type}}; }}
  return fetch(base + path, init).then(
    (answer) => label + ": " + answer.type + " answer",
    (error) => label + ": " + error.message);
}})).then((results) => {{
  const out = document.getElementById("out");
  for (const result of results) {{
    const item = document.createElement("li");
    item.textContent = result.value;
    out.appendChild(item);
  }}
  document.title = "done";
}});
</script></body></html>"""


# ---- playbooks and targets -----------------------------------------------------------------------
def playbook(name: str, schedule: str | None = None, kind: str = "attack") -> tuple[str, str]:
    """(catalog path, YAML) of a one-step playbook of this run."""
    path = f"{kind}/{RUN}/{name}"
    meta = f"{{name: {name.replace('-', '_')}, path: {path}"
    meta += f", schedule: '{schedule}'}}" if schedule else "}"
    text = (
        "apiVersion: noetl.io/v2\nkind: Playbook\n"
        f"metadata: {meta}\n"
        "workflow:\n  - step: start\n    tool: {kind: noop}\n"
    )
    return path, text


@dataclass
class Targets:
    running: str  # a RUNNING execution: the cancel target
    finished: str  # a COMPLETED one: the rerun target
    schedule: int  # an active schedule: the trigger / pause target
    attack_paths: list[str] = field(default_factory=list)


def api(server: ServeProcess, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """A request as curl sends it: no Origin, no fetch metadata."""
    return httpx.request(method, f"{server.url}{path}", timeout=30, **kwargs)


def status_of(server: ServeProcess, execution_id: str) -> str:
    answer = api(server, "GET", f"/api/v1/executions/{execution_id}")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["status"])


def snapshot(server: ServeProcess, targets: Targets) -> dict[str, Any]:
    """What an attack could change, read without browser headers."""

    def total(query: str) -> int:
        answer = api(server, "GET", f"/api/v1/executions?limit=1{query}")
        assert answer.status_code == 200, answer.text
        return int(answer.json()["total"])

    catalog = api(server, "GET", "/api/v1/catalog").json()
    schedules = api(server, "GET", "/api/v1/schedules").json()
    return {
        "executions": total(""),
        "reruns": total("&trigger=rerun"),
        "scheduled": total("&trigger=schedule"),
        "running": status_of(server, targets.running),
        "finished": status_of(server, targets.finished),
        "schedules": sorted(schedules, key=lambda s: s["schedule_id"]),
        "attack_paths": sorted(
            e["path"] for e in catalog if str(e["path"]).startswith(f"attack/{RUN}/")
        ),
    }


def assert_unchanged(server: ServeProcess, targets: Targets, before: dict[str, Any]) -> None:
    after = snapshot(server, targets)
    assert after["attack_paths"] == [], "an attack registered a playbook"
    for path in targets.attack_paths:
        assert api(server, "GET", f"/api/v1/catalog/{path}").status_code == 404, path
    assert after["executions"] == before["executions"], "an attack started an execution"
    assert after["reruns"] == before["reruns"] and after["scheduled"] == before["scheduled"]
    assert after["running"] == "RUNNING", "an attack cancelled the running execution"
    assert after["finished"] == "COMPLETED"
    assert after["schedules"] == before["schedules"], "an attack changed the schedules"
    mine = next(s for s in after["schedules"] if s["schedule_id"] == targets.schedule)
    assert mine["enabled"]


def access_log(server: ServeProcess, since: int) -> list[tuple[str, str, int]]:
    """(method, path, status) of each request `serve` logged after byte `since`."""
    text = server.log.read_bytes()[since:].decode(errors="replace")
    return [
        (m[1], m[2], int(m[3]))
        for m in re.finditer(r'"(GET|POST|PUT|PATCH|DELETE) (\S+) HTTP/[\d.]+" (\d{3})', text)
    ]


def log_size(server: ServeProcess) -> int:
    return server.log.stat().st_size


# ---- the browser ---------------------------------------------------------------------------------
def evil_chrome() -> Any:
    """Headless Chromium as the conftest builds it, plus the two attack names mapped (a
    rebinding name to serve's address, the attacker's name to its site) and a performance
    log (statuses)."""
    return chrome_driver(
        (f"--host-resolver-rules=MAP {REBIND} 127.0.0.1, MAP {ATTACKER} 127.0.0.2",),
        {"goog:loggingPrefs": {"performance": "ALL"}},
    )


def responses(driver: Any) -> dict[str, int]:
    """URL -> HTTP status of the responses Chromium received since the last call."""
    seen: dict[str, int] = {}
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.responseReceived":
            answer = message["params"]["response"]
            seen[answer["url"]] = int(answer["status"])
    return seen


def page_text(driver: Any) -> str:
    return str(driver.find_element(By.TAG_NAME, "body").text)


def shot(driver: Any, folder: Path, name: str) -> None:
    assert driver.save_screenshot(str(folder / name)), name


# ---- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def serve(distributed: dict[str, Any]) -> Iterator[ServeProcess]:
    """`serve` without credentials (loopback only: the case a local page most threatens),
    `-v` for its access log."""
    program = [sys.executable, "-m", "noetl_celery.cli.main", "-v"]
    with serving(distributed["env"], program=program) as server:
        yield server


@pytest.fixture(scope="module")
def attacker() -> Iterator[AttackSite]:
    site = AttackSite()
    yield site
    site.close()


@pytest.fixture(scope="module")
def evil() -> Iterator[Any]:
    driver = evil_chrome()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def targets(serve: ServeProcess) -> Iterator[Targets]:
    """Registered and started through the API as a client that is not a browser."""
    slow = (PLAYBOOKS / "slow_loop.yaml").read_text()
    yaml_type = {"Content-Type": "application/yaml"}
    assert api(serve, "POST", "/api/v1/catalog", content=slow, headers=yaml_type).is_success
    quick = {"path": "tests/slow_loop", "payload": {"n": 2, "pause": 0}}
    finished = api(serve, "POST", "/api/v1/executions", json=quick).json()["execution_id"]
    poll(lambda: status_of(serve, finished) == "COMPLETED", "the quick run completed", 60)
    slow_run = {"path": "tests/slow_loop", "payload": {"n": 3000, "pause": 0.3, "window": 1}}
    running = api(serve, "POST", "/api/v1/executions", json=slow_run).json()["execution_id"]
    schedule = api(
        serve,
        "POST",
        "/api/v1/schedules",
        json={"path": "tests/slow_loop", "cron": "0 3 1 1 *", "payload": {"n": 1, "pause": 0}},
    )
    assert schedule.status_code == 201, schedule.text
    made = Targets(running, finished, int(schedule.json()["schedule_id"]))
    try:
        yield made
    finally:
        api(serve, "DELETE", f"/api/v1/schedules/{made.schedule}")
        api(serve, "POST", f"/api/v1/executions/{running}/cancel")


# ---- 1. forms and no-cors fetches from another origin -------------------------------------------
def attack_forms(base: str, targets: Targets) -> list[Form]:
    run, done, sid = targets.running, targets.finished, targets.schedule
    forms: list[Form] = []

    def path_of(name: str, schedule: str | None = None) -> str:
        path, text = playbook(name, schedule)
        targets.attack_paths.append(path)
        return text

    text = path_of("form-register-json")
    forms.append(
        json_form(
            "register-json",
            f"{base}/api/catalog/register",
            json.dumps({"content": text, "resource_type": "Playbook", "x": "y"}),
        )
    )
    text = path_of("form-register-yaml")
    forms.append(yaml_form("register-yaml", f"{base}/api/catalog/register", text))
    forms.append(
        json_form(
            "execute",
            f"{base}/api/execute",
            json.dumps({"path": "tests/slow_loop", "payload": {"note": "x"}}),
        )
    )
    text = path_of("form-start")
    forms.append(
        json_form(
            "start",
            f"{base}/api/v1/executions",
            json.dumps({"playbook": text, "payload": {"note": "x"}}),
        )
    )
    text = path_of("form-catalog-json", "* * * * *")
    # the `=` lands in a trailing YAML comment of the content
    forms.append(
        json_form("catalog-json", f"{base}/api/v1/catalog", json.dumps({"content": text + "#"}))
    )
    text = path_of("form-catalog-yaml", "* * * * *")
    forms.append(yaml_form("catalog-yaml", f"{base}/api/v1/catalog", text))
    text = path_of("form-schedule")
    forms.append(
        json_form(
            "schedule-add",
            f"{base}/api/v1/schedules",
            json.dumps({"playbook": text, "cron": "* * * * *", "payload": {"note": "x"}}),
        )
    )
    text = path_of("form-multipart-start")
    forms.append(
        Form(
            "multipart-start",
            f"{base}/api/v1/executions",
            "multipart/form-data",
            [("playbook", text)],
        )
    )
    text = path_of("form-multipart-register")
    forms.append(
        Form(
            "multipart-register",
            f"{base}/api/catalog/register",
            "multipart/form-data",
            [("content", text)],
        )
    )
    urlencoded = "application/x-www-form-urlencoded"
    forms += [
        Form("page-cancel", f"{base}/executions/{run}/cancel", urlencoded, [("go", "1")]),
        Form("page-rerun", f"{base}/executions/{done}/rerun", urlencoded, [("from_step", "")]),
        Form(
            "page-redrive",
            f"{base}/executions/{done}/redrive",
            urlencoded,
            [("scope", "checked"), ("item", "start:1:0"), ("item", "start:1:1")],
        ),
        Form("page-trigger", f"{base}/schedules/{sid}/trigger", urlencoded, [("go", "1")]),
        Form("page-pause", f"{base}/schedules/{sid}/pause", urlencoded, [("go", "1")]),
        Form("api-cancel", f"{base}/api/v1/executions/{run}/cancel", urlencoded, [("go", "1")]),
        Form(
            "api-rerun", f"{base}/api/executions/{done}/rerun", "multipart/form-data", [("go", "1")]
        ),
    ]
    return forms


def attack_fetches(targets: Targets) -> list[tuple[str, str, str | None, str | None]]:
    run, done, sid = targets.running, targets.finished, targets.schedule
    plain = "text/plain"
    made: list[tuple[str, str, str | None, str | None]] = []

    def text_of(name: str, schedule: str | None = None) -> str:
        path, text = playbook(name, schedule)
        targets.attack_paths.append(path)
        return text

    text = text_of("fetch-register-yaml")
    made.append(("register yaml", "/api/catalog/register", text, plain))
    text = text_of("fetch-register-json")
    made.append(("register json", "/api/catalog/register", json.dumps({"content": text}), plain))
    made.append(("execute", "/api/execute", json.dumps({"path": "tests/slow_loop"}), plain))
    text = text_of("fetch-start")
    made.append(("start", "/api/v1/executions", json.dumps({"playbook": text}), plain))
    text = text_of("fetch-catalog", "* * * * *")
    made.append(("catalog", "/api/v1/catalog", text, plain))
    text = text_of("fetch-schedule")
    body = json.dumps({"playbook": text, "cron": "* * * * *"})
    made.append(("schedule add", "/api/v1/schedules", body, plain))
    made.append(
        (
            "schedule form",
            "/api/v1/schedules",
            "path=tests/slow_loop",
            "application/x-www-form-urlencoded",
        )
    )
    for label, path in (
        ("cancel v1", f"/api/v1/executions/{run}/cancel"),
        ("cancel noetl", f"/api/executions/{run}/cancel"),
        ("rerun v1", f"/api/v1/executions/{done}/rerun"),
        ("rerun noetl", f"/api/executions/{done}/rerun"),
        ("trigger", f"/api/v1/schedules/{sid}/trigger"),
        ("pause", f"/api/v1/schedules/{sid}/pause"),
        ("page cancel", f"/executions/{run}/cancel"),
        ("page rerun", f"/executions/{done}/rerun"),
        ("page redrive", f"/executions/{done}/redrive"),
        ("page trigger", f"/schedules/{sid}/trigger"),
    ):
        made.append((label, path, None, None))  # body-less, as the buttons send them
    made.append(
        (
            "page cancel form",
            f"/executions/{run}/cancel",
            "go=1",
            "application/x-www-form-urlencoded",
        )
    )
    return made


def test_forms_and_no_cors_fetches_from_another_origin_change_nothing(
    evil: Any, serve: ServeProcess, attacker: AttackSite, targets: Targets, screenshots: Path
) -> None:
    before = snapshot(serve, targets)
    assert before["running"] == "RUNNING" and before["attack_paths"] == []
    since = log_size(serve)
    responses(evil)  # drop what came before

    forms = attack_forms(serve.url, targets)
    for form in forms:
        attacker.pages[f"/form/{form.name}"] = form.page()
    fetches = attack_fetches(targets)
    attacker.pages["/fetches"] = fetch_page(serve.url, fetches)

    # each form page submits itself on load; the browser lands on serve's refusal
    for form in forms:
        evil.get(f"{attacker.url}/form/{form.name}")
        poll(lambda: evil.current_url.startswith(serve.url), f"{form.name} submitted")
        poll(lambda: REFUSED in page_text(evil), f"{form.name}: the refusal shown")
        seen = responses(evil)
        assert seen.get(form.action) == 403, (form.name, seen)
        if form.name == "page-cancel":
            shot(evil, screenshots, "cross-site-form-refused.png")

    evil.get(f"{attacker.url}/fetches")
    poll(lambda: evil.title == "done", "the no-cors fetches settled")
    settled = page_text(evil)
    shot(evil, screenshots, "cross-site-attack-page.png")
    seen = responses(evil)

    # serve saw every request and refused each one with 403
    sent = [f.action.removeprefix(serve.url) for f in forms] + [path for _, path, _, _ in fetches]

    def logged_posts() -> list[tuple[str, int]] | None:
        got = [(path, code) for method, path, code in access_log(serve, since) if method == "POST"]
        return got if len(got) >= len(sent) else None

    posts = poll(logged_posts, "every attack in serve's access log")
    assert {code for _, code in posts} == {403}, posts
    for path in sent:
        assert (path, 403) in posts, (path, posts)
    assert len(posts) == len(sent), posts
    for _, path, _, _ in fetches:
        if f"{serve.url}{path}" in seen:  # when the browser reports it: the same 403
            assert seen[f"{serve.url}{path}"] == 403, path
    assert len(settled.splitlines()) >= len(fetches) + 1

    assert_unchanged(serve, targets, before)

    # the contrast: the same routes, as a client that is not a browser, in JSON, work
    path, text = playbook("contrast", kind="contrast")
    answer = api(serve, "POST", "/api/catalog/register", json={"content": text})
    assert answer.status_code == 200, answer.text
    assert api(serve, "GET", f"/api/v1/catalog/{path}").status_code == 200
    started = api(serve, "POST", "/api/execute", json={"path": path})
    assert started.status_code == 200, started.text
    poll(lambda: status_of(serve, started.json()["execution_id"]) == "COMPLETED", "contrast run")
    # ...and the text/plain bodies the browser sent are refused for their type alone
    answer = api(
        serve,
        "POST",
        "/api/execute",
        content=json.dumps({"path": path}),
        headers={"Content-Type": "text/plain"},
    )
    assert answer.status_code == 415, answer.text
    assert snapshot(serve, targets)["executions"] == before["executions"] + 1


# ---- 2. a rebinding name -----------------------------------------------------------------------
def test_host_rebinding_is_refused(
    evil: Any, serve: ServeProcess, attacker: AttackSite, targets: Targets
) -> None:
    before = snapshot(serve, targets)
    since = log_size(serve)
    rebound = f"http://{REBIND}:{serve.port}"
    responses(evil)

    evil.get(f"{rebound}/executions")
    assert UNKNOWN_HOST in page_text(evil)
    assert targets.running not in evil.page_source  # nothing of the engine's shown
    evil.get(f"{rebound}/api/v1/executions")
    assert UNKNOWN_HOST in page_text(evil)  # the one-line {"detail": ...}
    seen = responses(evil)
    assert seen[f"{rebound}/executions"] == 400 and seen[f"{rebound}/api/v1/executions"] == 400

    # script running in the rebound origin: same-origin JSON requests, answers readable
    sent = evil.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        const [running, finished, schedule, playbook] = arguments;
        const json = {"Content-Type": "application/json"};
        const calls = [
          ["GET", "/api/v1/executions", null],
          ["GET", "/api/v1/executions/" + running, null],
          ["POST", "/api/v1/executions", JSON.stringify({playbook: playbook})],
          ["POST", "/api/execute", JSON.stringify({path: "tests/slow_loop"})],
          ["POST", "/api/catalog/register", JSON.stringify({content: playbook})],
          ["POST", "/api/v1/executions/" + running + "/cancel", null],
          ["POST", "/api/executions/" + finished + "/rerun", "{}"],
          ["POST", "/api/v1/schedules/" + schedule + "/trigger", null],
        ];
        Promise.all(calls.map(([method, path, body]) =>
          fetch(path, {method: method, body: body, headers: body ? json : {}})
            .then(async (r) => [method, path, r.status, await r.text()],
                  (e) => [method, path, 0, String(e)])
        )).then(done);
        """,
        targets.running,
        targets.finished,
        targets.schedule,
        playbook("rebind-start")[1],
    )
    targets.attack_paths.append(playbook("rebind-start")[0])
    for method, path, code, body in sent:
        assert code == 400, (method, path, code, body)
        assert UNKNOWN_HOST in body, body

    # a form on the attacker's name posting to the rebound name
    form = json_form(
        "rebind-execute",
        f"{rebound}/api/execute",
        json.dumps({"path": "tests/slow_loop", "payload": {"note": "x"}}),
    )
    attacker.pages["/form/rebind-execute"] = form.page()
    evil.get(f"http://{ATTACKER}:{attacker.port}/form/rebind-execute")
    poll(lambda: evil.current_url.startswith(rebound), "the rebinding form submitted")
    poll(lambda: UNKNOWN_HOST in page_text(evil), "the unknown Host refusal shown")
    assert responses(evil).get(form.action) == 400

    expected = [("GET", "/executions"), ("GET", "/api/v1/executions"), ("POST", "/api/execute")]
    expected += [(method, path) for method, path, _, _ in sent]

    def all_logged() -> list[tuple[str, str, int]] | None:
        got = access_log(serve, since)
        return got if all(any(g[:2] == e for g in got) for e in expected) else None

    logged = poll(all_logged, "every rebound request in serve's access log")
    assert {code for _, _, code in logged} == {400}, logged
    assert_unchanged(serve, targets, before)


# ---- 3. framing ----------------------------------------------------------------------------------
def test_serve_and_flower_pages_refuse_cross_origin_frames(
    evil: Any,
    serve: ServeProcess,
    flower: FlowerServer,
    attacker: AttackSite,
    targets: Targets,
    screenshots: Path,
) -> None:
    use_credentials(evil, FLOWER_AUTH)  # Flower's frames would open if framing were allowed
    try:
        frames = {
            "serve-executions": f"{serve.url}/executions",
            "serve-execution": f"{serve.url}/executions/{targets.running}",
            "serve-schedules": f"{serve.url}/schedules",
            "serve-docs": f"{serve.url}/docs",
            "flower-executions": f"{flower.url}/executions",
            "flower-execution": f"{flower.url}/executions/{targets.running}",
            "flower-schedules": f"{flower.url}/schedules",
            "flower-dashboard": f"{flower.url}/",
            "flower-tasks": f"{flower.url}/tasks",
            "flower-broker": f"{flower.url}/broker",
        }
        own = f"{attacker.url}/own"
        attacker.pages["/own"] = "<!doctype html><title>own</title><p>the attacker's own page</p>"
        items = "".join(
            f'<figure><figcaption>{name}</figcaption><iframe id="{name}" src="{src}" '
            'width="420" height="140"></iframe></figure>'
            for name, src in [*frames.items(), ("own", own)]
        )
        attacker.pages["/frames"] = (
            "<!doctype html><html><head><title>frames</title>"
            "<style>figure{display:inline-block;margin:4px}</style></head>"
            f"<body>{items}</body></html>"
        )
        responses(evil)
        evil.get(f"{attacker.url}/frames")
        poll(lambda: evil.execute_script("return document.readyState") == "complete", "frames")
        time.sleep(1)

        def inside(name: str) -> tuple[str, str]:
            evil.switch_to.frame(evil.find_element(By.ID, name))
            try:
                url = str(evil.execute_script("return document.URL"))
                body = str(
                    evil.execute_script("return document.body ? document.body.innerText : ''")
                )
                return url, body
            finally:
                evil.switch_to.default_content()

        url, body = inside("own")  # the control: a frame that may render does
        assert url == own and "the attacker's own page" in body
        seen = responses(evil)
        for name, src in frames.items():
            url, body = inside(name)
            assert url == BLOCKED_FRAME, (name, url, body[:200])
            # it was not refused for want of a login or a page: it arrived, and was not shown
            assert seen.get(src) == 200, (name, src, seen.get(src))
        shot(evil, screenshots, "cross-site-frames.png")
    finally:
        use_credentials(evil, None)


def test_flower_pages_refuse_cross_site_forms_with_the_login(
    evil: Any,
    serve: ServeProcess,
    flower: FlowerServer,
    attacker: AttackSite,
    targets: Targets,
) -> None:
    """Flower's added pages act too (cancel, rerun, redrive, a schedule's trigger and
    pause): the same forms from the attacker's site, the browser holding Flower's login,
    are refused and change nothing."""
    before = snapshot(serve, targets)
    run, done, sid = targets.running, targets.finished, targets.schedule
    urlencoded = "application/x-www-form-urlencoded"
    forms = [
        Form("flower-cancel", f"{flower.url}/executions/{run}/cancel", urlencoded, [("go", "1")]),
        Form("flower-rerun", f"{flower.url}/executions/{done}/rerun", urlencoded, [("go", "1")]),
        Form(
            "flower-redrive",
            f"{flower.url}/executions/{done}/redrive",
            urlencoded,
            [("scope", "all")],
        ),
        Form("flower-trigger", f"{flower.url}/schedules/{sid}/trigger", urlencoded, [("go", "1")]),
        Form("flower-pause", f"{flower.url}/schedules/{sid}/pause", "text/plain", [("go", "1")]),
    ]
    use_credentials(evil, FLOWER_AUTH)
    seen: dict[str, int] = {}
    try:
        responses(evil)
        for form in forms:
            attacker.pages[f"/form/{form.name}"] = form.page()
            evil.get(f"{attacker.url}/form/{form.name}")
            assert status_for(evil, form.action, seen) == 403, form.name
            assert evil.current_url == form.action  # landed on Flower's refusal
    finally:
        use_credentials(evil, None)
    assert_unchanged(serve, targets, before)


def status_for(driver: Any, url: str, seen: dict[str, int]) -> int:
    """The status Chromium received for `url` (waiting for it); `seen` keeps the others."""

    def check() -> int | None:
        seen.update(responses(driver))
        return seen.get(url)

    return poll(check, f"the answer of {url}")
