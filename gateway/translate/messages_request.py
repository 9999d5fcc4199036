"""An Anthropic Messages request as an OpenAI chat completions request.

Mapping (what the engines' own Messages endpoints do, vLLM's `anthropic/serving_messages.py` and
llama.cpp's `server-common.cpp` conversion, with their gaps filled):

- `system` (a string or text blocks) -> a leading system message.
- user text/image blocks -> content parts (`image` base64 or url source -> `image_url`); `tool_result`
  blocks -> `tool` messages placed before the user's other content, since chat templates expect tool
  answers right after the assistant turn that called them.
- assistant text -> content, `thinking` -> `reasoning_content` (vLLM renames it to `reasoning` on input),
  `tool_use` -> `tool_calls` with the input JSON-encoded as `arguments`.
- `tools` (input_schema -> parameters), `tool_choice` (auto / any -> required / tool -> named / none),
  `disable_parallel_tool_use` -> `parallel_tool_calls: false`.
- `stop_sequences` -> `stop`; `max_tokens`, `temperature`, `top_p`, `top_k` as they are.
- `thinking` -> `chat_template_kwargs.enable_thinking` (enabled/adaptive: true, disabled: false). vLLM,
  SGLang and llama.cpp all read that key for thinking models; a budget has no common chat field, so
  `budget_tokens` is not forwarded.
- `stream` -> `stream` plus `stream_options.include_usage`, so the final `message_delta` has usage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

JSON = dict[str, Any]


class TranslationError(ValueError):
    """The request is not a Messages request this library can translate: the client's 400."""


def messages_to_chat(body: Mapping[str, Any]) -> JSON:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise TranslationError("messages: must be a non-empty list")
    chat: JSON = {"model": body.get("model"), "messages": _system(body.get("system"))}
    for number, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") not in ("user", "assistant"):
            raise TranslationError(f"messages.{number}: needs role 'user' or 'assistant'")
        chat["messages"].extend(_turn(message))
    _copy_sampling(body, chat)
    _copy_tools(body, chat)
    thinking = body.get("thinking")
    if isinstance(thinking, Mapping) and thinking.get("type") in ("enabled", "adaptive", "disabled"):
        chat["chat_template_kwargs"] = {"enable_thinking": thinking.get("type") != "disabled"}
    if body.get("stream"):
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def _system(system: Any) -> list[JSON]:
    if isinstance(system, str):
        return [{"role": "system", "content": system}] if system else []
    if isinstance(system, list):
        text = "\n".join(_block_texts(system))
        return [{"role": "system", "content": text}] if text else []
    return []


def _turn(message: Mapping[str, Any]) -> list[JSON]:
    role, content = message["role"], message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise TranslationError("message content must be a string or a list of blocks")
    blocks = [b for b in content if isinstance(b, Mapping)]
    if role == "assistant":
        return [_assistant(blocks)]
    tool_messages = [_tool_message(b) for b in blocks if b.get("type") == "tool_result"]
    parts = [part for b in blocks if (part := _user_part(b)) is not None]
    if parts or not tool_messages:
        tool_messages.append({"role": "user", "content": _content(parts)})
    return tool_messages


def _assistant(blocks: list[Mapping[str, Any]]) -> JSON:
    text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    reasoning = "".join(str(b.get("thinking", "")) for b in blocks if b.get("type") == "thinking")
    calls = [
        {
            "id": str(b.get("id", "")),
            "type": "function",
            "function": {"name": str(b.get("name", "")), "arguments": json.dumps(b.get("input") or {})},
        }
        for b in blocks
        if b.get("type") == "tool_use"
    ]
    message: JSON = {"role": "assistant", "content": text if text or not calls else None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_message(block: Mapping[str, Any]) -> JSON:
    content = block.get("content")
    text = content if isinstance(content, str) else "\n".join(_block_texts(content))
    return {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text}


def _user_part(block: Mapping[str, Any]) -> JSON | None:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": str(block.get("text", ""))}
    if kind == "image":
        source = block.get("source")
        if not isinstance(source, Mapping):
            raise TranslationError("image block needs a source")
        if source.get("type") == "url":
            url = str(source.get("url", ""))
        else:
            url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
        return {"type": "image_url", "image_url": {"url": url}}
    return None  # tool_result is a message of its own; other block kinds have no chat counterpart


def _content(parts: list[JSON]) -> str | list[JSON]:
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _block_texts(blocks: Any) -> list[str]:
    if not isinstance(blocks, list):
        return []
    return [str(b.get("text", "")) for b in blocks if isinstance(b, Mapping) and b.get("type") == "text"]


def _copy_sampling(body: Mapping[str, Any], chat: JSON) -> None:
    for key in ("max_tokens", "temperature", "top_p", "top_k"):
        if body.get(key) is not None:
            chat[key] = body[key]
    stops = body.get("stop_sequences")
    if isinstance(stops, list) and stops:
        chat["stop"] = [str(s) for s in stops]
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping) and isinstance(metadata.get("user_id"), str):
        chat["user"] = metadata["user_id"]


def _copy_tools(body: Mapping[str, Any], chat: JSON) -> None:
    tools = body.get("tools")
    if isinstance(tools, list):
        functions = [_function(t) for t in tools if isinstance(t, Mapping) and "input_schema" in t]
        if functions:
            chat["tools"] = functions
    choice = body.get("tool_choice")
    if not isinstance(choice, Mapping):
        return
    kind = choice.get("type")
    if kind == "tool":
        chat["tool_choice"] = {"type": "function", "function": {"name": str(choice.get("name", ""))}}
    elif kind in ("auto", "any", "none"):
        chat["tool_choice"] = "required" if kind == "any" else kind
    if choice.get("disable_parallel_tool_use") is True:
        chat["parallel_tool_calls"] = False


def _function(tool: Mapping[str, Any]) -> JSON:
    function: JSON = {"name": str(tool.get("name", ""))}
    if tool.get("description"):
        function["description"] = tool["description"]
    function["parameters"] = tool["input_schema"]
    return {"type": "function", "function": function}
