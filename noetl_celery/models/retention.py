"""Which ended executions a prune may delete (`noetl-celery db prune`, NOETL_RETENTION):
a pure decision over rows the store read (store.retention), table-tested on its own.

The unit of deletion is a *family*: the executions linked by sub-playbook parent/child
links (`parent_execution_id`), transitively. A family goes whole or not at all:

- every member must have ended (COMPLETED, FAILED, CANCELLED) before the cutoff, so an
  ended child of a running parent stays, an ended parent whose child still runs stays,
  and a detached child that ended recently keeps its long-ended parent (no execution is
  left pointing at a parent that was deleted under it);
- no execution still running may be a rerun of a member: a rerun reads its original's
  variables, results and failed items when it starts (passes.rerun).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from noetl_celery.constants import TERMINAL_STATUSES


@dataclass(frozen=True)
class Lineage:
    """An execution as a prune sees it: its status, when it ended, and its links."""

    execution_id: str
    status: str
    ended_at: dt.datetime | None
    parent_execution_id: str | None = None
    rerun_of: str | None = None

    def ended_before(self, cutoff: dt.datetime) -> bool:
        return self.status in TERMINAL_STATUSES and (
            self.ended_at is not None and self.ended_at < cutoff
        )


@dataclass(frozen=True)
class Decision:
    """Families to delete (each a sorted tuple of ids, in a stable order) and how many
    executions that ended before the cutoff stay because of a link."""

    families: tuple[tuple[str, ...], ...]
    kept: tuple[str, ...]

    @property
    def executions(self) -> int:
        return sum(len(f) for f in self.families)


def families(rows: Iterable[Lineage]) -> list[set[str]]:
    """The connected groups of `rows` by parent/child links (a parent that is not among
    the rows, deleted long ago, links nothing)."""
    ids = {r.execution_id for r in rows}
    root: dict[str, str] = {i: i for i in ids}

    def find(x: str) -> str:
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    for row in rows:
        parent = row.parent_execution_id
        if parent is not None and parent in ids:
            a, b = find(row.execution_id), find(parent)
            if a != b:
                root[max(a, b)] = min(a, b)
    groups: dict[str, set[str]] = {}
    for i in ids:
        groups.setdefault(find(i), set()).add(i)
    return list(groups.values())


def decide(rows: Iterable[Lineage], cutoff: dt.datetime) -> Decision:
    """What a prune deletes among `rows`: the candidates that ended before `cutoff` and
    every execution linked to them (their parents and children, transitively, and the
    runs that rerun them). Families are listed in the order of their smallest id."""
    listed = list(rows)
    by_id = {r.execution_id: r for r in listed}
    rerun_live = {
        r.rerun_of for r in listed if r.rerun_of is not None and r.status not in TERMINAL_STATUSES
    }
    chosen: list[tuple[str, ...]] = []
    kept: list[str] = []
    for group in families(listed):
        members = [by_id[i] for i in group]
        if all(m.ended_before(cutoff) for m in members) and not (group & rerun_live):
            chosen.append(tuple(sorted(group)))
        else:
            kept.extend(m.execution_id for m in members if m.ended_before(cutoff))
    chosen.sort()
    return Decision(families=tuple(chosen), kept=tuple(sorted(kept)))
