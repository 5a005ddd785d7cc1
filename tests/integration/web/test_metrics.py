"""`/metrics` of a real `serve` over a real run: the series a Prometheus server scrapes,
parsed with prometheus_client's own parser."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.engines import celery_engine

pytestmark = pytest.mark.integration
PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(f"{url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def test_metrics_count_a_failed_loop(
    served: Any, distributed: dict[str, Any], tmp_path: Path
) -> None:
    engine = celery_engine(distributed["url"], distributed["redis_url"], tmp_path)
    try:
        before = scrape(served.url)
        execution_id = engine.start_text((PLAYBOOKS / "items_fail.yaml").read_text(), {"n": 10})
        assert engine.wait(execution_id, 60).status == "FAILED"
    finally:
        engine.close()
    after = scrape(served.url)
    step = (("playbook", "tests/items_fail"), ("step", "each"))

    def grew(name: str, labels: tuple[tuple[str, str], ...] = ()) -> float:
        return after[(name, labels)] - before.get((name, labels), 0.0)

    assert grew("noetl_loop_items_succeeded_total", step) == 9
    assert grew("noetl_loop_items_failed_total", step) == 1
    assert grew("noetl_executions", (("status", "FAILED"),)) == 1
    # nothing of it is still in flight
    assert after[("noetl_commands", (("status", "issued"),))] >= 0
    assert ("noetl_oldest_unclaimed_command_age_seconds", ()) in after
    for name in ("noetl_reaper_reissued_total", "noetl_lease_expiries_total"):
        assert (name, ()) in after
