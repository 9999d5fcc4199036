"""Checks at the door of the completion routes: what the gateway itself reads or re-encodes must be sane.

Every request field still passes through untouched; these checks only refuse, with a clear 400, a body
the gateway could not route or forward safely:

- nesting deeper than `MAX_DEPTH`: the gateway re-encodes the body with orjson when it rewrites the model
  alias or `stream_options`, and orjson writes at most 254 levels; refusing at the door keeps that
  failure (and its blame) away from the backends;
- more than `MAX_VALUES` JSON values in the whole body, whatever the fields (counted before parsing, in
  api/body_parse.py, so the refusal costs one pass of `bytes.count`);
- more than `MAX_MESSAGES` messages, `MAX_TOOLS` tools or `MAX_PARTS` content parts in one message
  (the defaults of `BodyLimits`, set by the operator in `limits:`);
- wrong types in the fields routing reads (routing/request/features.py): `stream` not a boolean, `messages`
  not a list of objects, `content` neither a string, a list of parts nor null, `tool_calls` not a list of
  objects whose `function` is an object, `tools` not a list of objects, `stream_options` not an object.

Numbers the features read (`max_tokens`, `temperature`, `n`, ...) and `response_format` are tolerated
in any type by routing/request/features.py and left to the engine to judge.

One bounded pass over the parsed body: the walk stops at the first problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Deeper than any real request (a JSON schema in a tool or response_format rarely passes 20 levels), and
# far under orjson's 254-level limit on writing, so a body the gateway re-encodes always encodes.
MAX_DEPTH = 64
MAX_MESSAGES = 4096  # a long agent conversation stays in the hundreds
MAX_TOOLS = 1024  # engines render every tool schema into the prompt; real requests send tens
MAX_PARTS = 1024  # content parts (text, images, audio) in one message
# JSON values in a whole body, any field, counted before parsing (api/body_parse.py): a prompt of token
# ids longer than this fits no engine's context, and parsing it would cost every other client.
MAX_VALUES = 1 << 20

Problem = tuple[str, str | None]  # (message, param)


@dataclass(frozen=True, slots=True)
class BodyLimits:
    """The counts a body may reach (settings `limits:`; the defaults are the constants above)."""

    max_depth: int = MAX_DEPTH
    max_messages: int = MAX_MESSAGES
    max_tools: int = MAX_TOOLS
    max_parts: int = MAX_PARTS
    max_values: int = MAX_VALUES


DEFAULT_LIMITS = BodyLimits()


def check_body(body: dict[str, Any], limits: BodyLimits = DEFAULT_LIMITS) -> Problem | None:
    """The first problem with a parsed request body, or None when the gateway can route and forward it."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        return "`stream` must be a boolean", "stream"
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        return "`stream_options` must be an object", "stream_options"
    problem = _counts(body, limits)  # cheap: before any walk, so an oversized list costs nothing more
    if problem is not None:
        return problem
    problem = _depth(body, limits.max_depth)
    if problem is not None:
        return problem
    messages = body.get("messages")
    if isinstance(messages, list):
        problem = _messages(messages, limits)
        if problem is not None:
            return problem
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
            return "`tools` must be a list of objects", "tools"
        if len(tools) > limits.max_tools:
            return f"`tools` has {len(tools)} items, over the limit of {limits.max_tools}", "tools"
    return None


def _counts(body: dict[str, Any], limits: BodyLimits) -> Problem | None:
    for key, limit in (("messages", limits.max_messages), ("tools", limits.max_tools)):
        items = body.get(key)
        if isinstance(items, list) and len(items) > limit:
            return f"`{key}` has {len(items)} items, over the limit of {limit}", key
    return None


def _depth(body: dict[str, Any], max_depth: int) -> Problem | None:
    """A problem if any value sits deeper than `max_depth` containers (the body itself is level 1). Level by
    level, no recursion: each container is visited once, and the walk stops at the first level too deep."""
    for key, value in body.items():
        if not isinstance(value, dict | list):
            continue
        level: list[Any] = [value]
        depth = 2
        while level:
            if depth > max_depth:
                return f"{key}: nested deeper than {max_depth} levels", str(key)
            below: list[Any] = []
            add = below.append
            for node in level:
                for child in node.values() if isinstance(node, dict) else node:
                    if isinstance(child, dict | list):
                        add(child)
            level = below
            depth += 1
    return None


def _messages(messages: list[Any], limits: BodyLimits) -> Problem | None:
    if len(messages) > limits.max_messages:
        count, limit = len(messages), limits.max_messages
        return f"`messages` has {count} items, over the limit of {limit}", "messages"
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"`messages[{i}]` must be an object", f"messages[{i}]"
        content = message.get("content")
        if isinstance(content, list):
            if len(content) > limits.max_parts:
                message_text = (
                    f"`messages[{i}].content` has {len(content)} parts, over the limit of {limits.max_parts}"
                )
                return message_text, f"messages[{i}].content"
        elif content is not None and not isinstance(content, str):
            return (
                f"`messages[{i}].content` must be a string, a list of parts or null",
                f"messages[{i}].content",
            )
        tool_calls = message.get("tool_calls")
        if tool_calls is None:
            continue
        if not isinstance(tool_calls, list):
            return f"`messages[{i}].tool_calls` must be a list", f"messages[{i}].tool_calls"
        for j, call in enumerate(tool_calls):
            param = f"messages[{i}].tool_calls[{j}]"
            if not isinstance(call, dict):
                return f"`{param}` must be an object", param
            # Present means an object, null included: OpenAI requires one, and vLLM's request
            # validation refuses null, so the gateway answers it as the engine would, at the door.
            if "function" in call and not isinstance(call["function"], dict):
                return f"`{param}.function` must be an object", f"{param}.function"
    return None
