"""An embedded start builds the http client before the execution's first command runs
(Engine.start, ToolServices.warm_up): built in the first http command instead, under the
lock its sibling items wait on, a parallel loop's items left all at once in any order
(NoETL's e2e test_pagination_basic saw its slow probe reach the server last)."""

from __future__ import annotations

from pathlib import Path

from tests.support.engines import embedded_engine

# the http step is never reached: only the start's warm-up can have built the client
HTTP_NEVER_REACHED = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: warm_up, path: tests/warm_up}
workflow:
  - step: start
    tool: {kind: python, code: "result = 1"}
    next: {arcs: [{step: fetch, when: "{{ false }}"}]}
  - step: fetch
    tool: {kind: http, url: "http://127.0.0.1:9/never"}
"""


def test_an_embedded_start_has_built_the_http_client_when_it_returns(tmp_path: Path) -> None:
    engine = embedded_engine(f"sqlite:///{tmp_path / 'noetl.sqlite3'}", tmp_path)
    try:
        assert engine.services._http == {}
        execution_id = engine.start_text(HTTP_NEVER_REACHED)
        assert engine.services._http, "start returned before the http client was built"
        assert engine.wait(execution_id, timeout=60).status == "COMPLETED"
    finally:
        engine.close()


def test_a_playbook_without_http_builds_no_client(tmp_path: Path) -> None:
    engine = embedded_engine(f"sqlite:///{tmp_path / 'noetl.sqlite3'}", tmp_path)
    try:
        execution_id = engine.start_text(HTTP_NEVER_REACHED.replace("kind: http", "kind: noop"))
        assert engine.wait(execution_id, timeout=60).status == "COMPLETED"
        assert engine.services._http == {}
    finally:
        engine.close()
