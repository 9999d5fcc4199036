"""What a request's output positions say, shared by every API shape the twin serves: the same plan
gives the same text (or tool call) whether it is framed as chat, completions, Messages or Responses."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.sim.flavors.base import Piece
from gateway.sim.flavors.request import RequestPlan
from gateway.sim.tools import ToolDelta


@dataclass(frozen=True, slots=True)
class Output:
    """A finished (or cut) answer: content, reasoning and the tool call, as far as `tokens` got."""

    content: str
    reasoning: str | None
    tool: ToolDelta | None


def pieces(plan: RequestPlan, start: int, count: int) -> list[Piece]:
    """The deltas of output positions [start, start+count): reasoning, content or tool call parts."""
    end = start + count
    if plan.request.endpoint == "completions":
        return [Piece(content=plan.output.span(start, count))]
    if plan.tool_call is not None:
        return [Piece(tool=delta) for delta in plan.tool_call.deltas(start, count)]
    boundary = plan.reasoning_tokens
    out: list[Piece] = []
    if start < boundary:
        out.append(Piece(reasoning=plan.output.span(start, min(end, boundary) - start)))
    if end > boundary:
        first = max(start, boundary)
        out.append(Piece(content=plan.output.span(first, end - first)))
    return out


def output_of(plan: RequestPlan, tokens: int) -> Output:
    if plan.tool_call is not None:
        return Output("", None, plan.tool_call.upto(tokens))
    reasoning_n = min(plan.reasoning_tokens, tokens)
    reasoning = plan.output.span(0, reasoning_n) if reasoning_n else None
    return Output(plan.output.span(reasoning_n, tokens - reasoning_n), reasoning, None)
