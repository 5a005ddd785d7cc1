"""The Prometheus view of a metrics snapshot (engine.metrics): a table of snapshots in,
the series out."""

from __future__ import annotations

from datetime import datetime, timedelta

from noetl_celery.engine.metrics import families, loop_items
from noetl_celery.store.counters import COUNTER_REISSUED, COUNTER_TIMEOUTS
from noetl_celery.store.metrics import LoopTotals, MetricsSnapshot

NOW = datetime(2026, 11, 25, 3, 0, 0)


def series(snapshot: MetricsSnapshot) -> dict[str, dict[tuple[str, ...], float]]:
    return {f.name: dict(f.samples) for f in families(snapshot, NOW)}


def test_an_empty_database_reports_zeros_for_every_series() -> None:
    out = series(MetricsSnapshot())
    assert out["noetl_executions"] == {
        ("CANCELLED",): 0,
        ("COMPLETED",): 0,
        ("FAILED",): 0,
        ("RUNNING",): 0,
    }
    assert out["noetl_commands"] == {
        ("issued",): 0,
        ("running",): 0,
        ("waiting",): 0,
        ("delayed",): 0,
    }
    assert out["noetl_oldest_unclaimed_command_age_seconds"] == {(): 0.0}
    assert out["noetl_loop_items_succeeded"] == {}
    assert out["noetl_loop_items_quarantined"] == {}
    assert out["noetl_reaper_reissued"] == {(): 0.0}


def test_loop_items_add_finished_epochs_and_the_live_ones() -> None:
    snapshot = MetricsSnapshot(
        finished_loops=[
            LoopTotals("etl/load", "fetch", 900, 3, 6),
            LoopTotals("etl/x", "a", 5, 0),
        ],
        running_states=[
            # a running epoch of the same step: its live counts are added
            (
                "etl/load",
                {"steps": {"fetch": {"loop": {"succeeded": 40, "failed": 2, "quarantined": 1}}}},
            ),
            # a finished epoch still in the snapshot is in the table already: not twice
            ("etl/load", {"steps": {"fetch": {"loop": {"succeeded": 7, "done": True}}}}),
            ("etl/load", {"steps": {"plain": {"status": "running"}}}),  # no loop
        ],
    )
    assert loop_items(snapshot) == {
        ("etl/load", "fetch"): (940, 5, 7),
        ("etl/x", "a"): (5, 0, 0),
    }
    out = series(snapshot)
    assert out["noetl_loop_items_failed"][("etl/load", "fetch")] == 5
    assert out["noetl_loop_items_quarantined"] == {("etl/load", "fetch"): 7, ("etl/x", "a"): 0}


def test_oldest_unclaimed_age_and_counters() -> None:
    snapshot = MetricsSnapshot(
        executions_by_status={"RUNNING": 2, "FAILED": 1},
        commands_by_status={"issued": 12, "running": 4},
        oldest_issued_at=NOW - timedelta(seconds=95.5),
        counters={COUNTER_REISSUED: 3, COUNTER_TIMEOUTS: 1},
    )
    out = series(snapshot)
    assert out["noetl_executions"][("RUNNING",)] == 2
    assert out["noetl_commands"][("issued",)] == 12
    assert out["noetl_oldest_unclaimed_command_age_seconds"] == {(): 95.5}
    assert out["noetl_reaper_reissued"] == {(): 3.0}
    assert out["noetl_step_timeouts"] == {(): 1.0}
    assert out["noetl_lease_expiries"] == {(): 0.0}
