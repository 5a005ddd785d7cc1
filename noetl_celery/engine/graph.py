"""A playbook's flow as a graph (nodes: steps, edges: `next` arcs) with each step's
status from an execution's state: what the API's `/graph` and the pages draw."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from typing_extensions import TypedDict

from noetl_celery.models.playbook import Playbook, Step

# a step the execution has not reached has no entry in the state
NOT_REACHED = "pending"


class GraphNode(TypedDict):
    step: str
    status: str  # the step's status, NOT_REACHED when it has not run
    tool: str | None


# `from` is a keyword: the functional form
GraphEdge = TypedDict("GraphEdge", {"from": str, "to": str, "when": str | None})


class FlowGraph(TypedDict):
    entry: str
    nodes: list[GraphNode]
    edges: list[GraphEdge]


def tool_kind(step: Step) -> str | None:
    """`python`, `http`, ... for one tool; `pipeline` for a list of tools (a step
    without a tool is `noop`: models.playbook)."""
    if step.tool is None:
        return None
    if isinstance(step.tool, list):
        return "pipeline"
    return step.tool.kind


def _when(value: str | bool | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"  # as YAML wrote it
    return value


def build_graph(playbook: Playbook, steps: Mapping[str, Any]) -> FlowGraph:
    """`{"nodes": [{step, status, tool}], "edges": [{from, to, when}]}` in workflow
    order; `steps` is the state snapshot's `steps` (status per step that ran)."""
    nodes: list[GraphNode] = []
    edges: list[GraphEdge] = []
    for step in playbook.workflow:
        state = steps.get(step.step)
        status = state.get("status") if isinstance(state, dict) else None
        nodes.append({"step": step.step, "status": status or NOT_REACHED, "tool": tool_kind(step)})
        for arc in step.arcs:
            edges.append({"from": step.step, "to": arc.step, "when": _when(arc.when)})
    return {"entry": playbook.entry_step, "nodes": nodes, "edges": edges}
