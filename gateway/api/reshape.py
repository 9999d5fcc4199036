"""ASGI `send` wrappers that change the shape of an answer on its way to the client, never its routing:

- `AnthropicErrors`: the gateway's OpenAI-style errors (`{"error": {...}}`, whole or as an SSE frame) in
  the Anthropic shape `{"type": "error", "error": {"type", "message"}}` a Messages client expects; an
  engine's own Messages errors already have it and pass untouched.
- `MessagesFromChat`: a chat completion (whole or streamed) from a backend that was sent the Messages
  request translated to chat (gateway/translate), as the Messages answer.
- `ResponseIdSniffer`: notes which backend created a Responses API response (api/response_ids.py).

Each holds back only what it must: a whole answer's head until its body (the length changes), nothing
of a stream but the partial frame at the end of a chunk.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import orjson

from gateway.api.asgi import Message, Send
from gateway.api.response_ids import SNIFF_BYTES, find_response_id
from gateway.translate import ChatToMessagesStream, chat_to_messages_response

# Anthropic error types by HTTP status (its API reference); the rest are api_error.
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def anthropic_error(status: int, message: str) -> bytes:
    kind = _ANTHROPIC_TYPES.get(status, "api_error")
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


def _as_anthropic(status: int, body: bytes) -> bytes:
    """An OpenAI-style error body in the Anthropic shape; anything else as it is."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if not isinstance(parsed, dict) or parsed.get("type") == "error":
        return body
    error = parsed.get("error")
    if isinstance(error, dict):
        return anthropic_error(status, str(error.get("message", "")))
    if isinstance(error, str):
        return anthropic_error(status, error)
    return body


def _with_length(headers: list[tuple[bytes, bytes]], size: int) -> list[tuple[bytes, bytes]]:
    kept = [(k, v) for k, v in headers if k.lower() != b"content-length"]
    return [*kept, (b"content-length", str(size).encode())]


class _WholeBody(ABC):
    """Holds a whole answer's head until its body is complete, then sends both, the body rewritten by
    `rewrite(status, body)` when `wants(status, content_type)`; a stream goes through untouched."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self._head: Message | None = None
        self._parts: list[bytes] = []
        self._rewrite = False
        self._streaming = False

    @abstractmethod
    def wants(self, status: int, content_type: bytes) -> bool:
        """Whether an answer with this status and content type is rewritten."""

    @abstractmethod
    def rewrite(self, status: int, body: bytes) -> bytes:
        """The body the client gets instead of `body`."""

    def stream_chunk(self, chunk: bytes, more: bool) -> bytes:
        return chunk

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            content_type = dict(message.get("headers", ())).get(b"content-type", b"")
            self._rewrite = self.wants(message["status"], content_type)
            if self._rewrite:
                self._head = message
                return
            self._streaming = b"event-stream" in content_type
        elif message["type"] == "http.response.body" and self._head is not None:
            self._parts.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            head, self._head = self._head, None
            body = self.rewrite(head["status"], b"".join(self._parts))
            head["headers"] = _with_length(list(head.get("headers", ())), len(body))
            await self.send(head)
            await self.send({"type": "http.response.body", "body": body})
            return
        elif message["type"] == "http.response.body" and self._streaming:
            more = bool(message.get("more_body", False))
            message = {**message, "body": self.stream_chunk(message.get("body", b""), more)}
        await self.send(message)


class AnthropicErrors(_WholeBody):
    def wants(self, status: int, content_type: bytes) -> bool:
        return status >= 400 and b"json" in content_type

    def rewrite(self, status: int, body: bytes) -> bytes:
        return _as_anthropic(status, body)

    def stream_chunk(self, chunk: bytes, more: bool) -> bytes:
        # The gateway's own error frame mid-stream (relay.py), then its [DONE]: an Anthropic error event.
        if b'data: {"error"' not in chunk:
            return chunk
        out = []
        for frame in chunk.split(b"\n\n"):
            if frame.startswith(b'data: {"error"'):
                frame = b"event: error\ndata: " + _frame_as_anthropic(frame[6:])
            elif frame == b"data: [DONE]":
                continue
            out.append(frame)
        return b"\n\n".join(out)


def _frame_as_anthropic(payload: bytes) -> bytes:
    try:
        error = orjson.loads(payload).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        error = None
    if not isinstance(error, dict):
        return anthropic_error(502, "the backend failed mid-stream")
    code = error.get("code")
    return anthropic_error(code if isinstance(code, int) else 502, str(error.get("message", "")))


class MessagesFromChat(_WholeBody):
    """The answer of a backend that was sent the Messages request as chat, back as a Messages answer."""

    def __init__(self, send: Send, model: str, input_tokens: int) -> None:
        super().__init__(send)
        self.model = model
        self._events = ChatToMessagesStream(model, input_tokens)
        self._partial = b""

    def wants(self, status: int, content_type: bytes) -> bool:
        return status == 200 and b"json" in content_type

    def rewrite(self, status: int, body: bytes) -> bytes:
        try:
            chat = orjson.loads(body)
        except orjson.JSONDecodeError:
            return body
        return orjson.dumps(chat_to_messages_response(chat, self.model)) if isinstance(chat, dict) else body

    def stream_chunk(self, chunk: bytes, more: bool) -> bytes:
        """The relay sends whole SSE frames; a partial one is kept for the next chunk all the same."""
        data = self._partial + chunk
        frames = data.split(b"\n\n")
        self._partial = frames.pop() if more else b""
        if not more and self._partial == b"" and frames and frames[-1] == b"":
            frames.pop()
        out: list[bytes] = []
        for frame in frames:
            payload = _data(frame)
            if payload is not None:
                out.extend(self._events.feed(payload))
            elif frame.strip():
                out.append(frame + b"\n\n")  # a comment (keep-alive) passes through
        if not more:
            if self._partial.strip():
                tail = _data(self._partial)
                if tail is not None:
                    out.extend(self._events.feed(tail))
            out.extend(self._events.close())
        return b"".join(out)


def _data(frame: bytes) -> bytes | None:
    lines = [
        line[5:].strip() for line in frame.replace(b"\r\n", b"\n").split(b"\n") if line.startswith(b"data:")
    ]
    return b"\n".join(lines) if lines else None


class ResponseIdSniffer:
    """Tells `remember(response_id, backend)` who created the response the answer carries: the backend
    from the gateway's `x-gateway-backend` header, the id from the answer's first bytes."""

    def __init__(self, send: Send, remember: Callable[[str, str], Any]) -> None:
        self.send = send
        self.remember = remember
        self._backend: str | None = None
        self._seen = b""

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            if message["status"] == 200:
                found = dict(message.get("headers", ())).get(b"x-gateway-backend")
                self._backend = found.decode() if found else None
        elif message["type"] == "http.response.body" and self._backend is not None:
            self._seen += message.get("body", b"")[:SNIFF_BYTES]
            response_id = find_response_id(self._seen)
            if response_id is not None or len(self._seen) >= SNIFF_BYTES:
                if response_id is not None:
                    self.remember(response_id, self._backend)
                self._backend = None  # found, or not in the first bytes: stop looking
        await self.send(message)
