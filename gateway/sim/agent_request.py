"""Messages and Responses request bodies as the chat request the twin plans, the way vLLM and llama.cpp
serve those APIs: convert to a chat completion request, then generate as chat does.

The twin keeps its own conversion (it imports nothing of the gateway): it needs only what changes the
prompt, the budget and the tool decision, so it is smaller than the gateway's gateway/translate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.sim.flavors.request import ApiError

JSON = dict[str, Any]


def messages_chat_body(body: Any) -> JSON:
    """An Anthropic Messages request as a chat body (max_tokens is required, as Anthropic's API has it)."""
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw or not all(isinstance(m, dict) for m in raw):
        raise ApiError(400, "messages must contain at least one item", param="messages")
    messages: list[JSON] = []
    system = body.get("system")
    if isinstance(system, list):
        system = "".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    if isinstance(system, str) and system:
        messages.append({"role": "system", "content": system})
    for message in raw:
        messages.extend(_anthropic_turn(message))
    chat: JSON = {key: body[key] for key in ("model", "max_tokens", "temperature", "stream") if key in body}
    chat["messages"] = messages
    if isinstance(body.get("tools"), list):
        chat["tools"] = body["tools"]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind = choice.get("type")
        chat["tool_choice"] = {"function": {"name": choice.get("name")}} if kind == "tool" else kind
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "disabled":
        chat["chat_template_kwargs"] = {"enable_thinking": False}
    return chat


def _anthropic_turn(message: Mapping[str, Any]) -> list[JSON]:
    role, content = message.get("role"), message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list) or not content:
        raise ApiError(400, "message content must not be empty", param="messages")
    blocks = [b for b in content if isinstance(b, dict)]
    out: list[JSON] = [
        {"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": _text(b.get("content"))}
        for b in blocks
        if b.get("type") == "tool_result"
    ]
    parts = [_part(b) for b in blocks if b.get("type") in ("text", "image")]
    calls = [_call(b.get("id"), b.get("name"), b.get("input")) for b in blocks if b.get("type") == "tool_use"]
    if parts or calls:
        turn: JSON = {"role": role, "content": parts}
        if calls:
            turn["tool_calls"] = calls
        out.append(turn)
    return out


def _part(block: Mapping[str, Any]) -> JSON:
    if block.get("type") == "image":
        return {"type": "image_url", "image_url": {"url": "data:image/png;base64,"}}
    return {"type": "text", "text": str(block.get("text", ""))}


def _call(call_id: Any, name: Any, arguments: Any) -> JSON:
    encoded = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": encoded}}


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return "" if content is None else str(content)


def responses_chat_body(body: Any, history: list[JSON]) -> JSON:
    """A Responses request as a chat body; `history` is the stored conversation of
    `previous_response_id` (its input and output), which the new input continues."""
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    messages: list[JSON] = []
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        messages.append({"role": "system", "content": body["instructions"]})
    messages.extend(history)
    raw = body.get("input")
    if isinstance(raw, str):
        messages.append({"role": "user", "content": raw})
    elif isinstance(raw, list):
        messages.extend(item for entry in raw if isinstance(entry, dict) if (item := _input_item(entry)))
    else:
        raise ApiError(400, "input must be a string or a list of items", param="input")
    chat: JSON = {key: body[key] for key in ("model", "temperature", "stream") if key in body}
    chat["messages"] = messages
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    if isinstance(body.get("tools"), list):
        chat["tools"] = body["tools"]
    choice = body.get("tool_choice")
    chat["tool_choice"] = {"function": {"name": choice.get("name")}} if isinstance(choice, dict) else choice
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") == "none":
        chat["chat_template_kwargs"] = {"enable_thinking": False}
    return chat


def _input_item(item: Mapping[str, Any]) -> JSON | None:
    kind = item.get("type", "message")
    if kind == "function_call":
        call = _call(item.get("call_id"), item.get("name"), item.get("arguments"))
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if kind == "function_call_output":
        return {"role": "tool", "tool_call_id": item.get("call_id"), "content": _text(item.get("output"))}
    if kind != "message":
        return None  # reasoning items and the like add nothing the twin's prompt counts
    content = item.get("content")
    if isinstance(content, list):
        content = [
            {"type": "image_url", "image_url": {"url": ""}}
            if part.get("type") == "input_image"
            else {"type": "text", "text": str(part.get("text", ""))}
            for part in content
            if isinstance(part, dict)
        ]
    return {"role": item.get("role", "user"), "content": content}
