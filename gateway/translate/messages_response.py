"""A chat completions answer as an Anthropic Message.

finish_reason -> stop_reason: `stop` -> `end_turn`, or `stop_sequence` when the engine names the stop
string it matched (vLLM `stop_reason`, SGLang `matched_stop`, both a string only for a stop string);
`length` -> `max_tokens`; `tool_calls` -> `tool_use`. Reasoning (`reasoning` in vLLM >= 0.16,
`reasoning_content` elsewhere) becomes a leading `thinking` block with an empty signature, content a
`text` block, each tool call a `tool_use` block whose `arguments` JSON is parsed into `input`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

JSON = dict[str, Any]
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def chat_to_messages_response(chat: Mapping[str, Any], model: str) -> JSON:
    choices = chat.get("choices") or [{}]
    choice: Mapping[str, Any] = choices[0]
    message: Mapping[str, Any] = choice.get("message") or {}
    content: list[JSON] = []
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    content.extend(tool_use_block(call) for call in message.get("tool_calls") or [])
    stop_reason, stop_sequence = stop_reason_of(choice)
    return {
        "id": message_id(str(chat.get("id", ""))),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage_of(chat.get("usage")),
    }


def stop_reason_of(choice: Mapping[str, Any]) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) for a chat choice's finish."""
    finish = choice.get("finish_reason") or "stop"
    matched = choice.get("stop_reason", choice.get("matched_stop"))
    if finish == "stop" and isinstance(matched, str):
        return "stop_sequence", matched
    return _STOP_REASONS.get(finish, "end_turn"), None


def tool_use_block(call: Mapping[str, Any]) -> JSON:
    function = call.get("function") or {}
    return {
        "type": "tool_use",
        "id": str(call.get("id") or ""),
        "name": str(function.get("name") or ""),
        "input": parse_arguments(function.get("arguments")),
    }


def parse_arguments(arguments: Any) -> JSON:
    """A tool call's arguments as an object; an engine's malformed JSON becomes `{}` (as llama.cpp does)."""
    if isinstance(arguments, Mapping):
        return dict(arguments)
    try:
        parsed = json.loads(arguments or "{}")
    except (TypeError, ValueError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def usage_of(usage: Any) -> JSON:
    usage = usage if isinstance(usage, Mapping) else {}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens", 0) if isinstance(details, Mapping) else 0
    prompt = int(usage.get("prompt_tokens") or 0)
    return {
        "input_tokens": prompt - int(cached or 0),
        "output_tokens": int(usage.get("completion_tokens") or 0),
        "cache_read_input_tokens": int(cached or 0),
        "cache_creation_input_tokens": 0,
    }


def message_id(chat_id: str) -> str:
    """`msg_` and the engine's id without its own prefix, so logs of both still match."""
    for prefix in ("chatcmpl-", "cmpl-"):
        if chat_id.startswith(prefix):
            chat_id = chat_id[len(prefix) :]
    return f"msg_{chat_id}"
