"""`models.retention.decide`: which ended executions a prune deletes, table-tested. A
family (parent/child links, transitively) goes whole or not at all; the original of a
running rerun stays."""

from __future__ import annotations

import datetime as dt

import pytest

from noetl_celery.models.retention import Lineage, decide, families

CUTOFF = dt.datetime(2026, 6, 1)
OLD = CUTOFF - dt.timedelta(days=3)
NEW = CUTOFF + dt.timedelta(hours=1)


def row(
    eid: str,
    status: str = "COMPLETED",
    ended: dt.datetime | None = OLD,
    parent: str | None = None,
    rerun_of: str | None = None,
) -> Lineage:
    return Lineage(eid, status, ended, parent, rerun_of)


CASES = [
    # (name, rows, deleted families, kept)
    ("ended long ago", [row("a")], [("a",)], []),
    ("every terminal status", [row("a", "FAILED"), row("b", "CANCELLED")], [("a",), ("b",)], []),
    ("ended within the age", [row("a", ended=NEW)], [], []),
    ("ended exactly at the cutoff stays", [row("a", ended=CUTOFF)], [], []),
    ("running", [row("a", "RUNNING", None)], [], []),
    ("terminal without an end time", [row("a", ended=None)], [], []),
    (
        "a family of three goes whole",
        [row("p"), row("c", parent="p"), row("g", "FAILED", parent="c")],
        [("c", "g", "p")],
        [],
    ),
    (
        "an ended child of a running parent stays",
        [row("p", "RUNNING", None), row("c", parent="p")],
        [],
        ["c"],
    ),
    (
        "an ended parent whose child runs stays, with its ended siblings",
        [row("p"), row("c", "RUNNING", None, parent="p"), row("s", parent="p")],
        [],
        ["p", "s"],
    ),
    (
        "a running grandchild keeps the whole tree",
        [row("p"), row("c", parent="p"), row("g", "RUNNING", None, parent="c")],
        [],
        ["c", "p"],
    ),
    (
        "a detached child that ended recently keeps its old parent",
        [row("p"), row("c", ended=NEW, parent="p")],
        [],
        ["p"],
    ),
    (
        "the original of a running rerun stays",
        [row("o", "FAILED"), row("r", "RUNNING", None, rerun_of="o")],
        [],
        ["o"],
    ),
    (
        "the original of an ended rerun goes (the rerun too when old)",
        [row("o", "FAILED"), row("r", rerun_of="o")],
        [("o",), ("r",)],
        [],
    ),
    (
        "a running rerun of a child keeps the child's family",
        [row("p"), row("c", parent="p"), row("r", "RUNNING", None, rerun_of="c")],
        [],
        ["c", "p"],
    ),
    (
        "a parent deleted long ago links nothing",
        [row("c", parent="gone")],
        [("c",)],
        [],
    ),
    (
        "families are decided each on their own",
        [row("a"), row("b", "RUNNING", None), row("c", parent="b"), row("d", parent="a")],
        [("a", "d")],
        ["c"],
    ),
]


@pytest.mark.parametrize(
    ("rows", "deleted", "kept"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_decide(rows: list[Lineage], deleted: list[tuple[str, ...]], kept: list[str]) -> None:
    decision = decide(rows, CUTOFF)
    assert list(decision.families) == deleted
    assert list(decision.kept) == kept
    assert decision.executions == sum(len(f) for f in deleted)


def test_the_order_of_the_rows_does_not_matter() -> None:
    rows = [row("p"), row("c", parent="p"), row("x"), row("y", "RUNNING", None, parent="x")]
    assert decide(rows, CUTOFF) == decide(list(reversed(rows)), CUTOFF)


def test_families_follow_links_both_ways() -> None:
    rows = [row("a"), row("b", parent="a"), row("c", parent="b"), row("d"), row("e", parent="a")]
    assert sorted(sorted(f) for f in families(rows)) == [["a", "b", "c", "e"], ["d"]]
