"""A chat completions SSE stream as an Anthropic Messages event stream, frame by frame.

Feed it each chat `data:` payload (bytes, str or an already parsed dict; `[DONE]` included) and send
what it returns. Events come out in the Messages order: `message_start`, `ping`, then per content block
`content_block_start`, its deltas and `content_block_stop` (thinking first, then text, then one
`tool_use` block per call with `input_json_delta`s), then `message_delta` with stop_reason and usage,
then `message_stop`. One block is open at a time: a new kind of delta closes the open block first,
as Anthropic's own streams never interleave blocks. A chat error frame becomes an `error` event and ends
the stream. The finish waits for `[DONE]` (or `close()`), because the usage chunk comes after the
finish chunk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.translate.messages_response import message_id, stop_reason_of

JSON = dict[str, Any]
# Anthropic error types by HTTP status, for an engine's error frame.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def sse_event(name: str, data: Mapping[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class ChatToMessagesStream:
    def __init__(self, model: str, input_tokens: int = 0) -> None:
        self.model = model
        self.input_tokens = input_tokens  # the gateway's estimate until the engine's usage arrives
        self.done = False
        self._started = False
        self._index = -1  # index of the open block, -1 when none is open
        self._open: str | None = None  # "thinking" | "text" | "tool_use"
        self._tools: dict[int, int] = {}  # chat tool_calls index -> block index
        self._finish: Mapping[str, Any] = {}
        self._usage: Mapping[str, Any] = {}

    def feed(self, payload: bytes | str | Mapping[str, Any]) -> list[bytes]:
        """The Messages events for one chat `data:` payload."""
        if self.done:
            return []
        if isinstance(payload, bytes | str):
            text = payload.decode() if isinstance(payload, bytes) else payload
            if text.strip() == "[DONE]":
                return self.close()
            chunk: Mapping[str, Any] = orjson.loads(text)
        else:
            chunk = payload
        if "error" in chunk or chunk.get("object") == "error":
            return self._error(chunk)
        out = self._start(chunk)
        if isinstance(chunk.get("usage"), Mapping):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            out.extend(self._delta(choice.get("delta") or {}))
            if choice.get("finish_reason"):
                self._finish = choice
        return out

    def close(self) -> list[bytes]:
        """The closing events (the upstream ended); nothing if the stream already ended."""
        if self.done:
            return []
        out = self._start({})
        out.extend(self._close_block())
        stop_reason, stop_sequence = stop_reason_of(self._finish)
        usage = {"output_tokens": int(self._usage.get("completion_tokens") or 0)}
        if "prompt_tokens" in self._usage:
            usage["input_tokens"] = int(self._usage["prompt_tokens"])
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        out.append(sse_event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        out.append(sse_event("message_stop", {"type": "message_stop"}))
        self.done = True
        return out

    def _start(self, chunk: Mapping[str, Any]) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        usage = chunk.get("usage")
        if isinstance(usage, Mapping) and "prompt_tokens" in usage:
            self.input_tokens = int(usage["prompt_tokens"])
        message: JSON = {
            "id": message_id(str(chunk.get("id", ""))),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
        }
        return [
            sse_event("message_start", {"type": "message_start", "message": message}),
            sse_event("ping", {"type": "ping"}),
        ]

    def _delta(self, delta: Mapping[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        reasoning = delta.get("reasoning") or delta.get("reasoning_content")
        if reasoning:
            out.extend(self._block("thinking", {"type": "thinking", "thinking": "", "signature": ""}))
            out.append(self._block_delta({"type": "thinking_delta", "thinking": reasoning}))
        if delta.get("content"):
            out.extend(self._block("text", {"type": "text", "text": ""}))
            out.append(self._block_delta({"type": "text_delta", "text": delta["content"]}))
        for call in delta.get("tool_calls") or []:
            out.extend(self._tool_call(call))
        return out

    def _tool_call(self, call: Mapping[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        number = int(call.get("index", 0))
        function = call.get("function") or {}
        if number not in self._tools:
            name = function.get("name") or ""
            block: JSON = {"type": "tool_use", "id": str(call.get("id") or ""), "name": name, "input": {}}
            out.extend(self._block("tool_use", block, force=True))
            self._tools[number] = self._index
        arguments = function.get("arguments")
        if arguments:
            delta = {"type": "input_json_delta", "partial_json": arguments}
            out.append(self._block_delta(delta, self._tools[number]))
        return out

    def _block(self, kind: str, block: JSON, force: bool = False) -> list[bytes]:
        """Open a block of `kind` unless one is open already (a tool call always opens a new one)."""
        if self._open == kind and not force:
            return []
        out = self._close_block()
        self._index += 1
        self._open = kind
        start = {"type": "content_block_start", "index": self._index, "content_block": block}
        out.append(sse_event("content_block_start", start))
        return out

    def _block_delta(self, delta: JSON, index: int | None = None) -> bytes:
        at = self._index if index is None else index
        return sse_event("content_block_delta", {"type": "content_block_delta", "index": at, "delta": delta})

    def _close_block(self) -> list[bytes]:
        if self._open is None:
            return []
        out = []
        if self._open == "thinking":  # clients expect a signature before a thinking block ends
            out.append(self._block_delta({"type": "signature_delta", "signature": ""}))
        out.append(sse_event("content_block_stop", {"type": "content_block_stop", "index": self._index}))
        self._open = None
        return out

    def _error(self, payload: Mapping[str, Any]) -> list[bytes]:
        inner = payload.get("error")
        error: Mapping[str, Any] = inner if isinstance(inner, Mapping) else payload
        status = error.get("code")
        kind = _ERROR_TYPES.get(status, "api_error") if isinstance(status, int) else "api_error"
        message = str(error.get("message") or "upstream error")
        self.done = True
        return [sse_event("error", {"type": "error", "error": {"type": kind, "message": message}})]
