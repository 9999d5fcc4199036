"""Twenty kinds of malformed request, as raw HTTP/1.1 bytes, and a raw client to send them.

Shared by `spark-gateway bench hostile`, `bench soak --malformed` and tests/faults/test_hostile_mix.py.
Each kind breaks one thing a hostile or buggy client can break: the framing (Content-Length, the head's
size, the content type), the JSON itself, or the type or size of a field the gateway reads. Every one must
get a 4xx with an OpenAI-style JSON error body from the gateway (or the engine's own 4xx, for the numbers
routing leaves to the engine), never a 5xx, and must never count against a backend.

Raw bytes rather than an HTTP client: a client library would refuse to send most of these.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

CHAT = "/v1/chat/completions"


@dataclass(frozen=True, slots=True)
class RawAnswer:
    status: int  # 0: no answer (the connection closed or timed out first)
    content_type: str
    body: bytes

    @property
    def json_error(self) -> bool:
        """An OpenAI-style error body: {"error": {"message": ..., "type": ..., ...}}."""
        if not self.content_type.startswith("application/json"):
            return False
        try:
            error = orjson.loads(self.body)["error"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return False
        return isinstance(error, dict) and isinstance(error.get("message"), str) and "type" in error


def request(
    body: bytes,
    *,
    path: str = CHAT,
    method: str = "POST",
    content_type: bytes = b"application/json",
    length: bytes | None = None,
    extra: bytes = b"",
) -> bytes:
    """One HTTP/1.1 request as bytes; `length` replaces the true Content-Length header line(s)."""
    declared = length if length is not None else b"Content-Length: %d\r\n" % len(body)
    head = b"%s %s HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n" % (method.encode(), path.encode())
    return head + b"Content-Type: " + content_type + b"\r\n" + declared + extra + b"\r\n" + body


def _chat(model: str, **fields: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **fields}


def _nested(depth: int) -> Any:
    value: Any = "x"
    for i in range(depth):
        value = {"a": value} if i % 2 else [value]
    return value


def _json(model: str, **fields: Any) -> bytes:
    return request(json.dumps(_chat(model, **fields)).encode())  # orjson stops at 254 levels


def _deep_stream(model: str, rng: random.Random) -> bytes:
    # orjson writes at most 254 levels, so it cannot build these: spliced as text.
    depth = rng.randint(255, 1023)
    doc = orjson.dumps(_chat(model, stream=True, extra="DEEP"))
    return request(doc.replace(b'"DEEP"', b'{"a":' * depth + b"1" + b"}" * depth))


def _assistant_call(function: Any) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": function}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


Kind = Callable[[str, random.Random], bytes]

KINDS: dict[str, Kind] = {
    "tools nested 300 deep": lambda m, r: _json(m, tools=[{"type": "function", "function": _nested(300)}]),
    "depth 255-1023 with stream true": _deep_stream,
    "tool_calls[].function a string": lambda m, r: _json(
        m, messages=[_assistant_call("get_weather"), {"role": "user", "content": "hi"}]
    ),
    "tool_calls[].function null": lambda m, r: _json(
        m, messages=[_assistant_call(None), {"role": "user", "content": "hi"}]
    ),
    'stream "true" as a string': lambda m, r: _json(m, stream="true"),
    "text/plain content type": lambda m, r: request(orjson.dumps(_chat(m)), content_type=b"text/plain"),
    "Content-Length not a number": lambda m, r: request(b"{}", length=b"Content-Length: 12abc\r\n"),
    "duplicate Content-Length": lambda m, r: request(
        b"{}", length=b"Content-Length: 2\r\nContent-Length: 3\r\n"
    ),
    "oversize header (200 KB)": lambda m, r: request(
        orjson.dumps(_chat(m)), extra=b"X-Junk: " + b"j" * 200_000 + b"\r\n"
    ),
    "5,000 messages": lambda m, r: _json(m, messages=[{"role": "user", "content": "x"}] * 5000),
    "invalid UTF-8": lambda m, r: request(b'{"model": "' + m.encode() + b'", "messages": "\xff\xfe"}'),
    "truncated JSON": lambda m, r: request(orjson.dumps(_chat(m))[: r.randint(5, 40)]),
    "body a JSON array": lambda m, r: request(orjson.dumps([_chat(m)])),
    "model a number": lambda m, r: request(orjson.dumps({**_chat(m), "model": 7})),
    "messages a string": lambda m, r: _json(m, messages="hello"),
    "content a number": lambda m, r: _json(m, messages=[{"role": "user", "content": 12}]),
    "tools an object": lambda m, r: _json(m, tools={"type": "function"}),
    "stream_options a string": lambda m, r: _json(m, stream=True, stream_options="usage"),
    "max_tokens a string": lambda m, r: _json(m, max_tokens="many"),
    "declared body over the size limit": lambda m, r: request(
        b"{}", length=b"Content-Length: 4000000000\r\n"
    ),
}


def malformed(model: str, count: int, rng: random.Random) -> list[tuple[str, bytes]]:
    """`count` requests, the kinds in turn (so 100 covers each of the 20 kinds 5 times), shuffled."""
    names = list(KINDS)
    out = [(names[i % len(names)], KINDS[names[i % len(names)]](model, rng)) for i in range(count)]
    rng.shuffle(out)
    return out


async def send_raw(host: str, port: int, data: bytes, timeout: float = 10.0) -> RawAnswer:
    """Send raw bytes, read one response (the request says `Connection: close`, so: until EOF)."""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(data)
                # The server may answer early and close: the answer may still be readable.
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
                raw = await reader.read()
            finally:
                writer.close()
    except (TimeoutError, ConnectionError):
        return RawAnswer(0, "", b"")
    return _answer(raw)


def _answer(raw: bytes) -> RawAnswer:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        return RawAnswer(0, "", raw)
    content_type = ""
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-type":
            content_type = value.strip().decode("latin-1").lower()
    return RawAnswer(status, content_type, body)
