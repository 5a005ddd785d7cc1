"""NoETL's names for tool results, read by embedded playbooks: an HTTP result's `body`
and a postgres result's `command_0` (models.shapes), never stored twice."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import noetl_celery
from noetl_celery.settings import Settings
from tests.support.http_server import http_api

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: result_shapes}}
workload: {{api: "{api}"}}
workflow:
  - step: fetch
    tool: {{kind: http, method: GET, url: "{{{{ workload.api }}}}/pages/shapes?page=1"}}
    next:
      arcs:
        - step: count
          when: "{{{{ output.data.body is not defined and output.data['items'] | length > 0 }}}}"
  - step: count
    tool:
      kind: postgres
      auth: pg_test
      query: "SELECT 1 AS a; SELECT 2 AS n, 'two' AS word"
    next:
      arcs:
        - step: check
          when: "{{{{ output.data.command_1.rows[0].n == 2 }}}}"
  - step: check
    tool:
      kind: python
      input:
        response: "{{{{ fetch }}}}"
        db: "{{{{ count }}}}"
        rows: "{{{{ count.data.command_1.rows }}}}"
        same: "{{{{ fetch.body == fetch.data }}}}"
      code: |
        body = response.get("body", {{}})
        result = {{
            "items": len(body.get("items", [])),
            "page": body.get("page"),
            "word": db.get("command_1", {{}}).get("rows", [])[0]["word"],
            "rows": rows,
            "same": same,
        }}
"""


def test_embedded_playbook_reads_body_and_command_n(credentials_file: Path, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, credentials_file=str(credentials_file))
    with http_api() as api:
        out = noetl_celery.run(PLAYBOOK.format(api=api), settings=settings)
    assert out["status"] == "COMPLETED", out
    assert out["result"] == {
        "items": 3,
        "page": 1,
        "word": "two",
        "rows": [{"n": 2, "word": "two"}],
        "same": True,
    }
    with sqlite3.connect(tmp_path / "noetl.sqlite3") as db:
        rows = dict(db.execute("SELECT step, data FROM results").fetchall())
    fetch, count = json.loads(rows["fetch"]), json.loads(rows["count"])
    assert "body" not in fetch and fetch["data"]["page"] == 1  # stored once, as `data`
    assert "command_1" not in count and count["statement_count"] == 2
