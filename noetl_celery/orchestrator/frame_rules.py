"""Which cursor frame bodies the worker that claimed the frame runs itself, and how
(orchestrator.cursor, worker.frames; docs/design.md §4): a frame's one body
(`frame.process: frame`, inline_body), its per-row bodies (inline_rows), and how many of
those at a time (row_threads)."""

from __future__ import annotations

from noetl_celery.models.playbook import Step, ToolSpec, step_timeout
from noetl_celery.orchestrator.state import LoopProgress

# tools that wait rather than compute: a frame's per-row bodies made of them may overlap
# in threads of the claiming worker (inline_rows)
WAITING_KINDS = frozenset({"http", "postgres", "noop"})
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
    task, no `spec.timeout`). With `frame.row_concurrency` > 1, rows whose tasks all wait
    rather than compute (WAITING_KINDS: an HTTP call, a statement, a no-op) run that
    many at a time in threads (row_threads); other rows one after another, which is
    what a quick local body (duckdb) gains most from, but not a body with an HTTP call
    or python code (which calls APIs as often as it computes): its rows are meant to
    overlap, and threads of one process would take turns on its interpreter where
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
    `row_concurrency` when every task of the body waits (WAITING_KINDS), else one."""
    return progress.row_concurrency if _kinds(step) <= WAITING_KINDS else 1


def _kinds(step: Step) -> set[str]:
    return {tool.kind for _, tool in step.tasks()}
