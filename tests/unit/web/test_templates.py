"""The pages' templates render with autoescape, and their forms carry Flower's token."""

from __future__ import annotations

import re

import pytest

from noetl_celery.web.pages.presenters import schedule_row
from noetl_celery.web.pages.render import render


def schedule(**kw: object) -> dict[str, object]:
    return schedule_row(
        {
            "schedule_id": 7,
            "name": "<b>nightly</b>",
            "path": "tests/x",
            "cron": "0 3 * * *",
            "timezone": "UTC",
            "enabled": True,
            "next_fire_at": "2026-11-26T03:00:00Z",
            "last_fire_at": None,
            **kw,
        }
    )


def cell(html: str, cls: str) -> str:
    found = re.search(rf'<td class="{cls}">(.*?)</td>', html, re.DOTALL)
    assert found, html
    return " ".join(found.group(1).split())


@pytest.mark.parametrize(
    ("timezone", "next_fire_at", "shown"),
    [
        ("UTC", "2026-11-26T03:00:00Z", "2026-11-26 03:00:00 UTC"),
        # its own zone first (winter: CET, UTC+1), UTC under it
        (
            "Europe/Berlin",
            "2026-11-26T02:00:00Z",
            "2026-11-26 03:00:00 CET<br><small>2026-11-26 02:00:00 UTC</small>",
        ),
        # summer time, and a zone west of UTC that moves the date back
        (
            "America/New_York",
            "2026-07-01T02:30:00Z",
            "2026-06-30 22:30:00 EDT<br><small>2026-07-01 02:30:00 UTC</small>",
        ),
        ("Not/AZone", "2026-11-26T03:00:00Z", "2026-11-26 03:00:00 UTC"),
        ("Europe/Berlin", None, "—"),  # paused: no next firing
    ],
)
def test_schedules_show_next_firing_in_their_zone_and_utc(
    timezone: str, next_fire_at: str | None, shown: str
) -> None:
    html = render(
        "schedules.html",
        base="",
        xsrf="",
        schedules=[schedule(timezone=timezone, next_fire_at=next_fire_at)],
    )
    assert cell(html, "schedule-next") == shown
    assert cell(html, "schedule-last") == "—"


def test_a_schedule_without_a_name_shows_its_catalog_path() -> None:
    html = render("schedules.html", base="", xsrf="", schedules=[schedule(name=None)])
    assert "tests/x</span>" in cell(html, "schedule-name")
    named = render("schedules.html", base="", xsrf="", schedules=[schedule(name="nightly")])
    assert cell(named, "schedule-name") == "nightly"


def test_values_are_escaped() -> None:
    html = render("schedules.html", base="", xsrf="", schedules=[schedule()])
    assert "<b>nightly</b>" not in html and "&lt;b&gt;nightly&lt;/b&gt;" in html


def test_forms_carry_the_token_only_when_there_is_one() -> None:
    with_token = render("schedules.html", base="/f", xsrf="2|ab|cd", schedules=[schedule()])
    assert with_token.count('name="_xsrf" value="2|ab|cd"') == 2  # pause and trigger
    assert 'action="/f/schedules/7/pause"' in with_token
    without = render("schedules.html", base="", xsrf="", schedules=[schedule(enabled=False)])
    assert "_xsrf" not in without and 'action="/schedules/7/resume"' in without
