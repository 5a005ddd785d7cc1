"""The pages under `serve`, over plain HTTP: paging that never loads more than a page,
the same-origin guard on every button, errors as pages (the browser tests drive them in
Chromium: tests/browser)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from noetl_celery import tracing
from noetl_celery.engine.service import Engine
from noetl_celery.models.filters import ExecutionFilter

pytestmark = pytest.mark.integration

TINY = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: tiny_pages, path: tests/tiny_pages}
workflow:
  - step: start
    tool: {kind: noop}
"""


def rows(html: str) -> list[str]:
    return re.findall(r'<tr data-execution="(\d+)"', html)


def test_the_list_pages_and_filters(served: Any, engine_on_workers: Engine) -> None:
    engine = engine_on_workers
    # a path of its own: the other tests' runs of TINY do not count here
    engine.register_text(TINY.replace("tests/tiny_pages", "tests/tiny_list"))
    started = [engine.start_path("tests/tiny_list") for _ in range(30)]
    for execution_id in started:
        engine.wait(execution_id, 60)
    url = f"{served.url}/executions?path=tests/tiny_list&limit=12"
    first = httpx.get(url)
    assert first.status_code == 200 and "of 30 executions" in first.text
    assert rows(first.text) == started[::-1][:12]  # newest first
    third = httpx.get(f"{url}&offset=24")
    assert rows(third.text) == started[::-1][24:]
    assert 'class="noetl-next"' not in third.text and 'class="noetl-prev"' in third.text
    # the refresh fragment: the body alone, the same rows
    fragment = httpx.get(f"{url}&fragment=1")
    assert "<html" not in fragment.text and rows(fragment.text) == rows(first.text)
    # filters combine; an unknown status finds nothing and says so
    failed = httpx.get(f"{served.url}/executions?path=tests/tiny_list&status=FAILED")
    assert rows(failed.text) == [] and "match these filters" in failed.text
    # a huge limit is clamped to the page maximum
    assert len(rows(httpx.get(f"{url.replace('limit=12', 'limit=100000')}").text)) == 30


def test_detail_events_and_errors(served: Any, engine_on_workers: Engine) -> None:
    engine = engine_on_workers
    execution_id = engine.start_text(TINY)
    engine.wait(execution_id, 60)
    page = httpx.get(f"{served.url}/executions/{execution_id}")
    assert page.status_code == 200 and 'data-step="start"' in page.text
    assert 'data-terminal="yes"' in page.text and 'id="rerun-button"' in page.text
    events = httpx.get(f"{served.url}/executions/{execution_id}/events?limit=1")
    assert events.status_code == 200 and "execution.started" in events.text
    assert 'class="noetl-next"' in events.text  # keyset paging: one event per page here
    missing = httpx.get(f"{served.url}/executions/123")
    assert missing.status_code == 404 and "123" in missing.text
    assert httpx.get(f"{served.url}/pages-static/../app.py").status_code == 404
    assert httpx.get(served.url, follow_redirects=False).headers["location"] == "/executions"


HALF_FAIL = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: half_fail, path: tests/half_fail}
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: each}]}
  - step: each
    loop: {in: "{{ range(4) | list }}", iterator: x, spec: {mode: parallel}}
    tool:
      kind: python
      input: {x: "{{ iter.x }}"}
      code: |
        assert x % 2 == 0, f"<b>odd</b> item {x} " + "y" * 400
        result = x
"""


def test_loops_show_succeeded_and_failed_apart_with_each_error_inline(
    served: Any, engine_on_workers: Engine
) -> None:
    engine = engine_on_workers
    execution_id = engine.start_text(HALF_FAIL)
    assert engine.wait(execution_id, 60).status == "FAILED"
    page = httpx.get(f"{served.url}/executions/{execution_id}").text
    # 4 items finished: 2 succeeded, 2 failed, never "4 done"
    assert '<span class="items-succeeded">2</span> succeeded' in page
    assert '<span class="items-failed">2</span> failed' in page
    assert re.search(r'class="num loop-succeeded">2<', page)
    assert re.search(r'class="num loop-failed">2<', page)
    # each failed item's row shows its message, escaped and cut short
    lines = re.findall(r'<span class="noetl-message-line">([^<]*)</span>', page)
    assert len(lines) == 2, lines
    assert all("&lt;b&gt;odd&lt;/b&gt; item" in line for line in lines)
    assert all(len(line) < 260 and line.endswith("…") for line in lines)
    assert "<b>odd</b>" not in page
    # the execution's trace id (noetl_celery.tracing), in its head and on each failed item
    trace = tracing.trace_id_of(execution_id)
    assert f'<code id="trace-id">{trace}</code>' in page
    assert page.count(f'<p class="noetl-trace">trace <code>{trace}</code>') == 2
    listed = httpx.get(f"{served.url}/executions?path=tests/half_fail").text
    assert re.search(r'class="num items-succeeded">2<', listed)


def test_buttons_refuse_cross_site_requests(served: Any, engine_on_workers: Engine) -> None:
    engine = engine_on_workers
    execution_id = engine.start_text(TINY)
    engine.wait(execution_id, 60)
    rerun = f"{served.url}/executions/{execution_id}/rerun"
    host = served.url.removeprefix("http://")
    for headers in (
        {},  # nothing says where it came from
        {"Origin": "http://evil.example"},
        {"Referer": "http://evil.example/page"},
        {"Sec-Fetch-Site": "cross-site", "Origin": served.url},
    ):
        answer = httpx.post(rerun, headers=headers, follow_redirects=False)
        assert answer.status_code == 403, headers
    reruns = ExecutionFilter(path="tests/tiny_pages", trigger="rerun", limit=100)
    assert len(engine.executions(reruns)) == 0
    made = httpx.post(rerun, headers={"Origin": f"http://{host}"}, follow_redirects=False)
    assert made.status_code == 303
    new_id = made.headers["location"].rsplit("/", 1)[1]
    assert engine.store.execution(new_id).rerun_of == execution_id
    unknown = httpx.post(
        f"{served.url}/schedules/99999/pause",
        headers={"Origin": served.url},
        follow_redirects=False,
    )
    assert unknown.status_code == 404


def test_children_link_both_ways(served: Any, engine_on_workers: Engine) -> None:
    from pathlib import Path

    playbooks = Path(__file__).resolve().parents[2] / "playbooks"
    engine = engine_on_workers
    engine.register_file(playbooks / "child_double.yaml")
    parent = engine.start_text((playbooks / "parent_fanout.yaml").read_text(), {"n": 3})
    assert engine.wait(parent, 120).status == "COMPLETED"
    page = httpx.get(f"{served.url}/executions/{parent}").text
    children = re.findall(r'<a href="/executions/(\d+)">\1</a></td>\s*<td>tests/child_double', page)
    assert len(children) == 3, page[page.find("Children") :][:800]
    child = httpx.get(f"{served.url}/executions/{children[0]}").text
    assert f'href="/executions/{parent}"' in child  # its parent
    listing = httpx.get(f"{served.url}/executions?parent={parent}").text
    assert sorted(rows(listing)) == sorted(children)


def test_schedules_page_shows_the_zone_and_a_name_for_unnamed_ones(
    served: Any, engine_on_workers: Engine
) -> None:
    engine = engine_on_workers
    engine.register_text(TINY.replace("tests/tiny_pages", "tests/tiny_zoned"))
    # as `schedule add` without --name makes it: no name
    schedule = engine.schedules.add("tests/tiny_zoned", "0 3 * * *", timezone="Europe/Berlin")
    try:
        page = httpx.get(f"{served.url}/schedules").text
        row = page.split(f'<tr data-schedule="{schedule.schedule_id}">')[1].split("</tr>")[0]
        name = re.search(r'<td class="schedule-name">(.*?)</td>', row, re.DOTALL)
        assert name and "tests/tiny_zoned" in name.group(1)
        # 03:00 in Berlin is CET or CEST, with the UTC time under it
        nxt = re.search(r'<td class="schedule-next">(.*?)</td>', row, re.DOTALL)
        assert nxt and re.search(r" 03:00:00 CES?T<br><small>.* 0[12]:00:00 UTC", nxt.group(1))
    finally:
        engine.schedules.remove(schedule.schedule_id)
