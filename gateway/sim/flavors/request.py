"""Engine-neutral reading of an OpenAI request body, and the plan an engine makes for it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gateway.sim.text import OutputText, Prompt, image_parts
from gateway.sim.tools import ToolCall, function_tools

Endpoint = Literal["chat", "completions"]
ErrorKind = Literal["bad_request", "not_found", "context", "server", "unavailable", "not_supported"]


class ApiError(Exception):
    """An error the engine answers with; each flavor renders it in its own JSON shape."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: ErrorKind = "bad_request",
        param: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.extra = dict(extra or {})


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    endpoint: Endpoint
    model: str | None
    messages: list[Mapping[str, Any]]  # chat only
    prompt: str  # completions only
    max_tokens: int | None
    max_tokens_field: str  # which field the client used, for error messages that name it
    stream: bool
    stream_options: Mapping[str, Any] | None
    temperature: float
    seed: int | None
    ignore_eos: bool
    enable_thinking: bool
    tools: tuple[Mapping[str, Any], ...] = ()  # function tools as chat {name, parameters}
    tool_choice: Any = None

    @property
    def images(self) -> int:
        return image_parts(self.messages) if self.endpoint == "chat" else 0

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))

    @property
    def continuous_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("continuous_usage_stats"))


@dataclass(frozen=True, slots=True)
class RequestPlan:
    """Everything decided before the first token: what to say, how much, and how to frame it."""

    request: ParsedRequest
    request_id: str
    created: int
    response_model: str
    prompt: Prompt
    output: OutputText
    completion_tokens: int  # tokens this request will produce if it runs to the end
    finish_reason: str  # "stop" (natural end) or "length" (max_tokens / context reached)
    reasoning_tokens: int  # leading output tokens that are reasoning, not content
    tool_call: ToolCall | None = None  # the output is this call instead of text (gateway/sim/tools.py)


def parse_request(endpoint: Endpoint, body: Any) -> ParsedRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    messages: list[Mapping[str, Any]] = []
    prompt = ""
    if endpoint == "chat":
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw or not all(isinstance(m, dict) for m in raw):
            raise ApiError(400, "'messages' must be a non-empty list of message objects.", param="messages")
        messages = raw
    else:
        raw_prompt = body.get("prompt")
        if isinstance(raw_prompt, list) and all(isinstance(p, str) for p in raw_prompt):
            raw_prompt = "".join(raw_prompt)
        if not isinstance(raw_prompt, str):
            raise ApiError(400, "'prompt' must be a string.", param="prompt")
        prompt = raw_prompt
    field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _optional_int(body, field)
    if max_tokens is not None and max_tokens < 1:
        raise ApiError(400, f"{field} must be at least 1, got {max_tokens}.", param=field)
    stream_options = body.get("stream_options")
    kwargs = body.get("chat_template_kwargs")
    return ParsedRequest(
        endpoint=endpoint,
        model=body.get("model") if isinstance(body.get("model"), str) and body.get("model") else None,
        messages=messages,
        prompt=prompt,
        max_tokens=max_tokens,
        max_tokens_field=field,
        stream=bool(body.get("stream", False)),
        stream_options=stream_options if isinstance(stream_options, dict) else None,
        temperature=_float(body, "temperature", 1.0),
        seed=_optional_int(body, "seed"),
        ignore_eos=bool(body.get("ignore_eos", False)),
        enable_thinking=not (isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False),
        tools=tuple(function_tools(body.get("tools"))) if endpoint == "chat" else (),
        tool_choice=body.get("tool_choice"),
    )


def _optional_int(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{key} must be an integer.", param=key)
    return value


def _float(body: Mapping[str, Any], key: str, default: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ApiError(400, f"{key} must be a number.", param=key)
    return float(value)
