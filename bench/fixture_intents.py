"""What some noetl/e2e fixtures mean to do, where running them is not the whole story.

Read by bench.noetl_fixtures for the e2e layout. Three kinds of entry, each with the
evidence for it, so that a fixture is never called fine because a table says so:

- `fail`: the fixture is meant to fail (e2e's `playbook_test_config.yaml` says
  `execution_status: failed`, or the fixture says so in its name or description). It
  counts as FAILED-AS-MEANT only when it failed (or was refused) with an error matching
  `pattern`; a run that completes, or fails elsewhere, is reported as a FAILED.
- `needs`: it needs state outside this machine that no service rewrite gives (a user an
  Auth0 login provisions, the kind cluster's own databases): reported NEEDS with it.
- `chance`: it fails by design with a known probability (a random exception its retry
  policy may not outlast); a failure matching `pattern` is FAILED-BY-CHANCE.
- `long`: a load test whose own documentation gives a run time above the default
  timeout: it gets `timeout` seconds.
- `upstream`: its own checks cannot pass on NoETL either; the reason names the NoETL
  source that shows it. Reported UPSTREAM with the engine's actual status, so a change in
  what we do is still seen.

Sub-playbooks of a selected fixture (a `kind: playbook` step names them; not of a suite
such as master_regression_test) are reported CHILD by the tool itself, with their
parent's status: they run under it. Worker playbooks whose parent cannot run here are
`needs` entries below.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Intent:
    kind: Literal["fail", "needs", "upstream", "long", "chance"]
    reason: str
    pattern: str | None = None  # fail: the error must match (case-insensitive)
    timeout: float | None = None  # long: its own timeout (seconds)


INTENTS: dict[str, Intent] = {
    "playbooks/retry_test/python_retry_exception.yaml": Intent(
        "chance",
        "raises when random.randint(1, 100) < 70, retried to 5 attempts: all 5 fail in "
        "0.69^5 = 16% of runs, on any engine",
        r"Random failure",
    ),
    "playbooks/pft_flow_test/test_pft_flow_v2.yaml": Intent(
        "long",
        "10 facilities x 1,000 patients x 5 data types, one record per request at HTTP "
        "concurrency 1 (its workload): the full PFT load test",
        timeout=1800.0,
    ),
    "playbooks/pagination/fetch_load_test/test_fetch_load.yaml": Intent(
        "long",
        "500 patients x 3.5 pages at a 2-4 s server delay (its workload passes min_delay "
        "2.0 / max_delay 4.0 as query parameters) at max_in_flight 5: its README expects "
        "17-20 min",
        timeout=1800.0,
    ),
    "playbooks/broken_playbooks/should_error_tool_is_required.yaml": Intent(
        "fail",
        "e2e playbook_test_config.yaml: execution_status failed, error_pattern below",
        r"(tool.*required|no sql command provided)",
    ),
    "playbooks/broken_sql.yaml": Intent(
        "fail", "its SQL has a deliberate trailing comma (`COUNT(*) as row_count,`)", r"syntax"
    ),
    "playbooks/spike/spike_failing_subflow.yaml": Intent(
        "fail",
        "its description: a deliberately-failing sub-playbook (an .invalid host)",
        r"hit_non_routable",
    ),
    "playbooks/pagination/pipeline/test_pipeline_error_handling.yaml": Intent(
        "fail",
        "step test_fail_auth tests `do: fail` on a 401; NoETL follows no arc of a failed "
        "step, so the run ends FAILED there (its report step is never reached)",
        r"test_fail_auth",
    ),
    "playbooks/api_integration/auth0/setup_admin_permissions.yaml": Intent(
        "needs", "Auth0 (assigns roles to user 1 of auth.users, which an Auth0 login provisions)"
    ),
    "playbooks/batch_execution/kind_playbook_lease_expiry/kind_playbook_lease_expiry.yaml": Intent(
        "needs",
        "a seeded public.stress_test_items (server_oom_stress_test seeds it, which needs "
        "test.example.com; it is a regression test of NATS lease expiry in NoETL)",
    ),
    "playbooks/batch_execution/kind_playbook_lease_expiry_worker/kind_playbook_lease_expiry_worker.yaml": Intent(  # noqa: E501
        "needs",
        "its parent kind_playbook_lease_expiry's seeded public.stress_test_items (a worker "
        "playbook: alone it reads its parent's table)",
    ),
    "playbooks/load_test/state_report_synthetic_load/state_report_synthetic_load_worker.yaml": Intent(  # noqa: E501
        "needs",
        "its parent state_report_synthetic_load's public.synthetic_state_report_load_items "
        "(the parent needs test.example.com; alone the worker reads its parent's table)",
    ),
    "playbooks/pft_flow_test/test_mds_batch_worker.yaml": Intent(
        "needs",
        "a legacy worker of test_pft_flow (its description; the README: the main flow no "
        "longer calls it): alone it reads test_pft_flow's pft_test_mds_assessment_ids_work",
    ),
    "playbooks/pft_flow_test/pft_queue_db_maintenance.yaml": Intent(
        "needs",
        "the kind cluster's demo_noetl database (user demo) holding the PFT queue table "
        "of an earlier PFT run",
    ),
    "playbooks/pagination/pipeline/test_pagination_pipeline.yaml": Intent(
        "needs",
        "the kind cluster's `noetl` database (user noetl) that its python task writes with "
        "psycopg2, as the same database its credential test_postgres names",
    ),
    "playbooks/pagination/pipeline_v2/test_pagination_pipeline_v2.yaml": Intent(
        "needs",
        "the kind cluster's `noetl` database (user noetl) that its python task writes with "
        "psycopg2, as the same database its credential test_postgres names",
    ),
    "playbooks/duckdb_test.yaml": Intent(
        "upstream",
        "reads `{{ start }}` as a list of rows; NoETL's duckdb tool returns "
        "{columns, rows, row_count} (noetl/tools src/tools/duckdb.rs), so its `process` "
        "step takes the 'Invalid query result format' branch there too",
    ),
    "playbooks/vars_test/test_vars_block.yaml": Intent(
        "upstream",
        "its policy `set:` reads `output.response.users`; a task's `output` is "
        "{status, data, error} in NoETL's tools (src/tools/task_sequence.rs) and "
        "{status, data, ref, error} in its Python worker: `response` exists in neither",
    ),
}


def judge(path: str, status: str, detail: str) -> tuple[str, str]:
    """The reported (status, detail) of a fixture that ran, given its intent."""
    intent = INTENTS.get(path)
    if intent is None:
        return status, detail
    if intent.kind == "fail":
        failed = status in ("FAILED", "REFUSED")
        if failed and intent.pattern and re.search(intent.pattern, detail, re.I):
            return "FAILED-AS-MEANT", f"{detail} [{intent.reason}]"
        return "FAILED", f"meant to fail ({intent.reason}) but {status}: {detail}"
    if intent.kind == "chance" and status == "FAILED" and re.search(intent.pattern or "", detail):
        return "FAILED-BY-CHANCE", f"{detail} [{intent.reason}]"
    if intent.kind == "upstream" and status != "COMPLETED":
        return "UPSTREAM", f"{status}: {detail} [{intent.reason}]"
    return status, detail


def needs(path: str) -> str | None:
    intent = INTENTS.get(path)
    return intent.reason if intent is not None and intent.kind == "needs" else None


def timeout(path: str, default: float) -> float:
    intent = INTENTS.get(path)
    if intent is not None and intent.timeout is not None:
        return max(default, intent.timeout)
    return default


def is_long(path: str) -> bool:
    intent = INTENTS.get(path)
    return intent is not None and intent.kind == "long"
