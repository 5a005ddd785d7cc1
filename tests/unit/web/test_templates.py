"""The pages' templates render with autoescape, and their forms carry Flower's token."""

from __future__ import annotations

from noetl_celery.web.pages.render import render


def schedule(**kw: object) -> dict[str, object]:
    return {
        "schedule_id": 7,
        "name": "<b>nightly</b>",
        "path": "tests/x",
        "cron": "0 3 * * *",
        "timezone": "UTC",
        "enabled": True,
        "next": "2026-11-26 03:00:00",
        "last": "",
        **kw,
    }


def test_values_are_escaped() -> None:
    html = render("schedules.html", base="", xsrf="", schedules=[schedule()])
    assert "<b>nightly</b>" not in html and "&lt;b&gt;nightly&lt;/b&gt;" in html


def test_forms_carry_the_token_only_when_there_is_one() -> None:
    with_token = render("schedules.html", base="/f", xsrf="2|ab|cd", schedules=[schedule()])
    assert with_token.count('name="_xsrf" value="2|ab|cd"') == 2  # pause and trigger
    assert 'action="/f/schedules/7/pause"' in with_token
    without = render("schedules.html", base="", xsrf="", schedules=[schedule(enabled=False)])
    assert "_xsrf" not in without and 'action="/schedules/7/resume"' in without
