"""Which cursor frame bodies the worker that claimed the frame runs itself, and how
(orchestrator.cursor, worker.frames; docs/design.md §4): a frame's one body
(`frame.process: frame`, inline_body), its per-row bodies (inline_rows), and how many of
those at a time (row_threads)."""

from __future__ import annotations

from noetl_celery.models.playbook import Step, ToolSpec, step_timeout
from noetl_celery.orchestrator.state import LoopProgress

# tools a body may hold for its rows to run in threads of the claiming worker: an HTTP
# call (it waits on a remote service), with statements and no-ops beside it (inline_rows)
THREADED_KINDS = frozenset({"http", "postgres", "noop"})
# tools whose rows are meant to overlap when `frame.row_concurrency` > 1 (inline_rows)
OVERLAPPING_KINDS = frozenset({"http", "python"})


def inline_body(step: Step) -> bool:
    """Whether the worker that claimed a frame may run the frame's body itself: one tool
    that ends in the worker (no pipeline: its policies may retry, park or jump; no
    sub-playbook: it waits for a child; no workbook task: it may be one; no
    `spec.timeout`: it is the body command's deadline). Any other body is a command of
    its own. (Per-row bodies: inline_rows.)"""
    tool = step.tool
    if not isinstance(tool, ToolSpec) or step.is_pipeline or step_timeout(step) is not None:
        return False
    return tool.kind not in ("playbook", "workbook")


def inline_rows(step: Step, progress: LoopProgress) -> bool:
    """Whether the worker that claimed a frame may run its per-row bodies itself
    (docs/design.md §4): a tool or a pipeline (policies, retries, jumps: a row's whole
    run, as its body command's) that ends in the worker (no sub-playbook, no workbook
    task, no `spec.timeout`). With `frame.row_concurrency` > 1, a body that calls an
    HTTP API runs that many rows at a time in threads (row_threads); other bodies run
    one row after another, which is what a quick local one (a statement, duckdb) gains
    most from, but not python code asked to overlap rows: it calls APIs as often as it
    computes, and threads of one process would take turns on its interpreter where
    commands spread over the worker processes, so each row stays a command of its own."""
    if progress.per_frame or step.tool is None or step_timeout(step) is not None:
        return False
    kinds = _kinds(step)
    if kinds & {"playbook", "workbook"}:
        return False
    return (
        row_threads(step, progress) > 1
        or progress.row_concurrency <= 1
        or not (kinds & OVERLAPPING_KINDS)
    )


def row_threads(step: Step, progress: LoopProgress) -> int:
    """How many of a frame's per-row bodies the claiming worker runs at once: the lane's
    `row_concurrency` when the body calls an HTTP API and its other tasks wait too
    (THREADED_KINDS), else one. A body of statements alone runs its rows one after
    another: in threads a per-row drain's UPDATE bodies ran at 0.45x the bare claim +
    mark loop, one at a time at 0.56x the same day (bench.cursor_drain --work mark)."""
    kinds = _kinds(step)
    threaded = "http" in kinds and kinds <= THREADED_KINDS
    return progress.row_concurrency if threaded else 1


def _kinds(step: Step) -> set[str]:
    return {tool.kind for _, tool in step.tasks()}
