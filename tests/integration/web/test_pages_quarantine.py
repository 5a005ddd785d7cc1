"""The quarantined items on the execution page under `serve`, over plain HTTP (the
browser test checks boxes in Chromium: tests/browser/test_pages.py): the loops table's
and the summary's counts, each item with its trace id, filters by step and kind, the
redrive form's one POST of the checked items (or all of a step), refused from another
site and answered with one line for a form the page never sends; `/metrics` counts
them per step."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from noetl_celery import tracing
from noetl_celery.engine.service import Engine
from noetl_celery.models.filters import ExecutionFilter
from tests.integration.web.test_metrics import scrape

pytestmark = pytest.mark.integration

FORM = {"Content-Type": "application/x-www-form-urlencoded"}
POISONED = (
    Path(__file__).resolve().parents[2] / "playbooks" / "quarantine_fixable.yaml"
).read_text()


def quarantined_rows(html: str) -> list[str]:
    return re.findall(r'<tr class="noetl-quarantined" data-item="([^"]+)"', html)


def post(served: Any, path: str, body: str, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{served.url}{path}",
        content=body.encode(),
        headers={**FORM, **headers},
        follow_redirects=False,
    )


@pytest.fixture
def quarantined(engine_on_workers: Engine, tmp_path: Path) -> tuple[str, Path]:
    """An execution that ended COMPLETED with items 2, 5, 8 of `each` and both of
    `other` quarantined, and the file whose existence fixes them."""
    fix = tmp_path / "fixed"
    eid = engine_on_workers.start_text(POISONED, {"fix": str(fix)})
    assert engine_on_workers.wait(eid, 90).status == "COMPLETED"
    return eid, fix


def test_the_page_shows_quarantined_items_counts_and_trace_ids(
    served: Any, engine_on_workers: Engine, quarantined: tuple[str, Path]
) -> None:
    eid, _ = quarantined
    page = httpx.get(f"{served.url}/executions/{eid}").text
    assert '<span class="items-quarantined">5</span> quarantined' in page
    assert '<span class="items-succeeded">7</span> succeeded' in page
    each = re.search(r'class="noetl-loop" data-step="each".*?</tr>', page, re.S)
    other = re.search(r'class="noetl-loop" data-step="other".*?</tr>', page, re.S)
    assert each and 'class="num loop-quarantined">3<' in each.group(0)
    assert other and 'class="num loop-quarantined">2<' in other.group(0)
    assert 'class="num loop-succeeded">7<' in each.group(0)
    assert quarantined_rows(page) == ["each:1:2", "each:1:5", "each:1:8", "other:1:0", "other:1:1"]
    trace = tracing.trace_id_of(eid)
    assert page.count(f'<td class="noetl-trace"><code>{trace}</code>') == 5
    assert "item 5 is poisoned" in page and "python_error" in page
    # all of a step at once: only once one step is chosen (a redrive runs one loop)
    assert 'id="redrive-checked-button"' in page and 'id="redrive-all-button"' not in page
    # filtered by step, then by a kind none of them has
    of_other = httpx.get(f"{served.url}/executions/{eid}?q_step=other").text
    assert quarantined_rows(of_other) == ["other:1:0", "other:1:1"]
    assert '<input type="hidden" name="step" value="other">' in of_other
    assert 'id="redrive-all-button"' in of_other and "Redrive all 2 shown" in of_other
    none = httpx.get(f"{served.url}/executions/{eid}?q_kind=timeout").text
    assert quarantined_rows(none) == [] and "of 0 quarantined items" in none
    # the live refresh does not read (or swap) the section: its checked boxes stay
    fragment = httpx.get(f"{served.url}/executions/{eid}?fragment=1").text
    assert "noetl-quarantine" not in fragment


def test_redrive_checked_items_from_the_page(
    served: Any, engine_on_workers: Engine, quarantined: tuple[str, Path]
) -> None:
    engine = engine_on_workers
    eid, fix = quarantined
    fix.write_text("fixed")
    here = f"/executions/{eid}/redrive"
    body = "scope=checked&step=&kind=&item=each%3A1%3A2&item=each%3A1%3A8"
    made = post(served, here, body, Origin=served.url)
    assert made.status_code == 303, made.text
    new_id = made.headers["location"].rsplit("/", 1)[1]
    assert engine.store.execution(new_id).rerun_of == eid
    assert engine.wait(new_id, 90).status == "COMPLETED"
    stats = engine.summary(new_id)["steps"]["each"]["stats"]
    assert stats == {"total": 2, "success": 2, "failed": 0}
    ran = engine.events(new_id, types=["command.completed"], step="each")
    assert sorted(int(e["payload"]["result"]["data"]) for e in ran) == [2, 8]
    # the original's page links each redriven item to the redrive; the rest stay open
    page = httpx.get(f"{served.url}/executions/{eid}").text
    assert page.count(f'class="noetl-redriven-by" href="/executions/{new_id}"') == 2
    assert re.search(r'value="each:1:5" aria-label="redrive each:1:5">', page)
    assert re.search(r'value="each:1:2" aria-label="redrive each:1:2" disabled>', page)
    # checked again: refused with one line, nothing started
    again = post(served, here, "scope=checked&item=each%3A1%3A2", Origin=served.url)
    assert again.status_code == 409 and "already redriven: each:1:2" in html.unescape(again.text)
    # all of a step: the one left of `each`, then `other`'s two
    rest = post(served, here, "scope=all&step=each&kind=", Origin=served.url)
    assert rest.status_code == 303
    rest_id = rest.headers["location"].rsplit("/", 1)[1]
    assert engine.wait(rest_id, 90).status == "COMPLETED"
    assert engine.summary(rest_id)["steps"]["each"]["stats"]["total"] == 1
    two = post(served, here, "scope=all&step=other", Origin=served.url)
    assert two.status_code == 303
    left = [q for q in engine.quarantine(eid)["items"] if not q["redriven_by"]]
    assert left == []


def test_the_redrive_form_refuses_other_sites_and_malformed_posts(
    served: Any, engine_on_workers: Engine, quarantined: tuple[str, Path]
) -> None:
    engine = engine_on_workers
    eid, _ = quarantined
    here = f"/executions/{eid}/redrive"
    body = "scope=checked&item=each%3A1%3A2"
    reruns = ExecutionFilter(path="tests/pages_quarantine", trigger="rerun", limit=500)
    before = len(engine.executions(reruns))
    for headers in (
        {},  # nothing says where it came from
        {"Origin": "http://evil.example"},
        {"Referer": "http://evil.example/page"},
        {"Sec-Fetch-Site": "cross-site", "Origin": served.url},
    ):
        answer = post(served, here, body, **headers)
        assert answer.status_code == 403, headers
    for bad, status, line in (
        ("scope=everything", 422, "form field 'scope': 'everything' is not a redrive"),
        ("scope=checked", 422, "form field 'item': no quarantined item checked"),
        ("scope=checked&item=nonsense", 409, "'nonsense' is not a quarantined item id"),
        ("scope=checked&item=each%3A1%3A3", 409, f"execution {eid} has no quarantined item"),
        ("scope=all&kind=bogus", 422, "kind: unknown error kind 'bogus'"),
        ("scope=all", 409, "several steps (each, other)"),
        ("scope=all&step=nope", 409, "no step 'nope'"),
    ):
        answer = post(served, here, bad, Origin=served.url)
        assert answer.status_code == status, (bad, answer.text[:300])
        assert line in html.unescape(answer.text), (bad, answer.text[-600:])
    # more boxes than any page shows (50 a page): a 413 that says so, not "cross-site"
    huge = "scope=checked" + "&item=each%3A1%3A2" * 1100
    answer = post(served, here, huge, Origin=served.url)
    assert answer.status_code == 413, answer.text[:300]
    assert "check fewer items at once" in html.unescape(answer.text)
    assert "did not come from this site" not in answer.text
    missing = post(served, "/executions/nope/redrive", body, Origin=served.url)
    assert missing.status_code == 404
    assert len(engine.executions(reruns)) == before
    assert all(q["redriven_by"] is None for q in engine.quarantine(eid)["items"])


def test_metrics_count_quarantined_items_per_step(
    served: Any, engine_on_workers: Engine, tmp_path: Path
) -> None:
    before = scrape(served.url)
    eid = engine_on_workers.start_text(POISONED, {"fix": str(tmp_path / "never")})
    assert engine_on_workers.wait(eid, 90).status == "COMPLETED"
    after = scrape(served.url)

    def grew(name: str, step: str) -> float:
        labels = (("playbook", "tests/pages_quarantine"), ("step", step))
        return after[(name, labels)] - before.get((name, labels), 0.0)

    assert grew("noetl_loop_items_quarantined_total", "each") == 3
    assert grew("noetl_loop_items_quarantined_total", "other") == 2
    assert grew("noetl_loop_items_succeeded_total", "each") == 7
    assert grew("noetl_loop_items_failed_total", "each") == 0
