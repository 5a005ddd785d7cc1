"""NoETL's names for stored tool results: read-only aliases (models.shapes)."""

from __future__ import annotations

from typing import Any

from noetl_celery.models.outcome import Outcome, output_view
from noetl_celery.models.shapes import read_aliases, with_read_aliases
from noetl_celery.templating import Renderer, unwrap, wrap
from noetl_celery.templating.context import build_context

HTTP: dict[str, Any] = {
    "status_code": 200,
    "headers": {"content-type": "application/json"},
    "url": "http://x/",
    "elapsed": 0.1,
    "data": {"items": [1, 2], "next_cursor": None},
}
PG: dict[str, Any] = {
    "status": "success",
    "rows": [{"n": 1}],
    "row_count": 1,
    "columns": ["n"],
    "statement_count": 1,
}


def test_http_body_is_the_same_object_as_data() -> None:
    aliases = read_aliases(HTTP)
    assert list(aliases) == ["body"] and aliases["body"] is HTTP["data"]
    assert "body" not in HTTP  # the stored result is untouched


def test_postgres_last_statement_is_command_n() -> None:
    assert read_aliases(PG) == {
        "command_0": {"status": "success", "rows": [{"n": 1}], "row_count": 1, "columns": ["n"]}
    }
    assert read_aliases(PG)["command_0"]["rows"] is PG["rows"]  # shared, not copied
    three = {"status": "success", "row_count": 2, "message": "INSERT 0 2", "statement_count": 3}
    assert list(read_aliases(three)) == ["command_2"]


def test_no_aliases_for_other_results() -> None:
    for value in ({"a": 1}, {"statement_count": True}, {"statement_count": 0}, [1], "x"):
        assert with_read_aliases(value) is value
    own = {**HTTP, "body": "mine"}  # a name the result already has wins
    assert read_aliases(own) == {}


def test_templates_read_body_and_command_0() -> None:
    renderer = Renderer()
    context = build_context({}, {"page": HTTP, "q": PG}, execution_id="1")
    whole = renderer.value("{{ page }}", context)
    assert whole["body"] == HTTP["data"] and whole["data"] == HTTP["data"]
    assert renderer.value("{{ page.body.items }}", context) == [1, 2]
    assert renderer.value("{{ q.command_0.rows }}", context) == [{"n": 1}]
    assert renderer.value("{{ q.data.command_0.rows }}", context) == [{"n": 1}]
    assert unwrap(wrap(PG))["command_0"]["row_count"] == 1


def test_output_view_has_the_aliases() -> None:
    assert output_view(Outcome("ok", HTTP), step_level=False)["data"]["body"] == HTTP["data"]
    assert output_view(Outcome("ok", HTTP))["data"] == HTTP["data"]  # step level: the body
    assert output_view(Outcome("ok", PG))["data"]["command_0"]["rows"] == [{"n": 1}]
