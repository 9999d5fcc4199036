"""The twin's one deterministic tool call, so a client's tool loop runs end to end.

When a request offers function tools and its conversation does not end with a tool result, the twin
"decides" to call the first tool (or the one `tool_choice` names; none with `tool_choice: "none"`), with
arguments built from the tool's parameter schema: each required property gets a fixed value of its type
("x", 1, true, [], {}, or the first enum value). After a tool result it answers with text. The call is
generated like text: one token for the call's name, then the arguments token by token.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.sim.tokens import pieces

_VALUES: dict[str, Any] = {"string": "x", "integer": 1, "number": 1, "boolean": True, "array": []}


@dataclass(frozen=True, slots=True)
class ToolDelta:
    """Part of a tool call as a stream sends it: the header (id and name) first, then argument text."""

    id: str | None
    name: str | None
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    argument_pieces: tuple[str, ...]

    @property
    def tokens(self) -> int:
        return 1 + len(self.argument_pieces)

    def deltas(self, start: int, count: int) -> list[ToolDelta]:
        """The deltas for output positions [start, start+count): the header at position 0."""
        out: list[ToolDelta] = []
        if start == 0 and count > 0:
            out.append(ToolDelta(self.id, self.name, ""))
        first, end = max(start, 1), start + count
        if end > first:
            out.append(ToolDelta(None, None, "".join(self.argument_pieces[first - 1 : end - 1])))
        return out

    def upto(self, tokens: int) -> ToolDelta:
        """The whole call as far as `tokens` output tokens got (all of it unless cut by max_tokens)."""
        return ToolDelta(self.id, self.name, "".join(self.argument_pieces[: max(0, tokens - 1)]))


def function_tools(tools: Any) -> list[Mapping[str, Any]]:
    """Function tools as chat `{name, parameters}` objects, from chat, Messages or Responses shapes."""
    out: list[Mapping[str, Any]] = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, Mapping):
            continue
        if isinstance(tool.get("function"), Mapping):  # chat: {"type": "function", "function": {...}}
            out.append(tool["function"])
        elif "input_schema" in tool:  # Messages
            out.append({"name": tool.get("name"), "parameters": tool.get("input_schema")})
        elif tool.get("type") == "function" and "name" in tool:  # Responses
            out.append({"name": tool.get("name"), "parameters": tool.get("parameters")})
    return out


def plan_tool_call(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], tool_choice: Any, call_id: str
) -> ToolCall | None:
    if not tools or tool_choice == "none" or (messages and messages[-1].get("role") == "tool"):
        return None
    tool = tools[0]
    named = tool_choice.get("function") if isinstance(tool_choice, Mapping) else None
    if isinstance(named, Mapping):
        tool = next((t for t in tools if t.get("name") == named.get("name")), tool)
    arguments = json.dumps(_arguments(tool.get("parameters")))
    return ToolCall(call_id, str(tool.get("name") or ""), arguments, tuple(pieces(arguments)))


def _arguments(schema: Any) -> dict[str, Any]:
    if not isinstance(schema, Mapping) or not isinstance(schema.get("properties"), Mapping):
        return {}
    properties: Mapping[str, Any] = schema["properties"]
    required = schema.get("required")
    names = [n for n in required if n in properties] if isinstance(required, list) else []
    return {name: _value(properties[name]) for name in names}


def _value(prop: Any) -> Any:
    if not isinstance(prop, Mapping):
        return "x"
    if isinstance(prop.get("enum"), list) and prop["enum"]:
        return prop["enum"][0]
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        return _arguments(prop)
    return _VALUES.get(str(kind), "x")
