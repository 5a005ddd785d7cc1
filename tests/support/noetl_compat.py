"""NoETL-style playbooks (with `metadata.path`) and polling helpers for the tests of
NoETL's routes (`/api/...`) and of NoETL's own CLI against `noetl-celery serve`."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx


def unique(prefix: str) -> str:
    """A catalog path no other test of the session uses."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def hello(path: str, greeting: str = "hello") -> str:
    """Two steps; the result echoes the payload's `who` (so tests see what reached it)."""
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: hello
  path: {path}
  description: Say {greeting} to who.
workload:
  who: world
workflow:
  - step: start
    tool:
      kind: python
      input: {{who: "{{{{ who }}}}"}}
      code: |
        result = {{"line": "{greeting} " + str(who)}}
    next: {{arcs: [{{step: end}}]}}
  - step: end
    tool:
      kind: python
      input: {{line: "{{{{ start.line }}}}", who: "{{{{ who }}}}"}}
      code: |
        result = {{"line": line, "who": who}}
"""


def failing(path: str) -> str:
    """The second step raises ZeroDivisionError: the execution ends FAILED."""
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: failing, path: {path}}}
workflow:
  - step: start
    tool: {{kind: noop}}
    next: {{arcs: [{{step: divide}}]}}
  - step: divide
    tool:
      kind: python
      code: |
        result = {{"x": 1 / 0}}
"""


def slow_loop(path: str, items: int = 200, seconds: float = 0.5) -> str:
    """A sequential loop of `items` sleeps: runs long enough to be cancelled."""
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: slow_loop, path: {path}}}
workload: {{n: {items}}}
workflow:
  - step: start
    tool: {{kind: noop}}
    next: {{arcs: [{{step: each}}]}}
  - step: each
    loop: {{in: "{{{{ range(n) | list }}}}", iterator: i, spec: {{mode: sequential}}}}
    tool:
      kind: python
      input: {{i: "{{{{ iter.i }}}}"}}
      code: |
        import time
        time.sleep({seconds})
        result = {{"i": i}}
    next: {{arcs: [{{step: end, when: "{{{{ event.name == 'loop.done' }}}}"}}]}}
  - step: end
    tool: {{kind: noop}}
"""


INVALID = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: broken, path: tests/broken}
workflow:
  - step: start
    tool: {kind: teleport}
"""


def wait_status(
    base_url: str, execution_id: str, until: set[str] | None = None, timeout: float = 60
) -> dict[str, Any]:
    """Poll `GET /api/executions/{id}/status` until its status is one of `until`
    (an ended status by default); the last body."""
    until = until or {"COMPLETED", "FAILED", "CANCELLED"}
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = httpx.get(
            f"{base_url}/api/executions/{execution_id}/status", timeout=10
        ).json()
        if body.get("status") in until:
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"execution {execution_id} not {until} after {timeout}s: {body}")
        time.sleep(0.2)
