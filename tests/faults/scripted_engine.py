"""A tiny vLLM-like engine that answers from a script, for faults the twin does not play: it is ready
(/health 200, /v1/models), answers chat completions whole or streamed, and answers a request whose body
holds `POISON` with the status it is told to (a 500 by default), as an engine that chokes on an input
does. Served on 127.0.0.1 by the tests through loopback.serve_asgi."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

POISON = "POISON-INPUT"
MODEL = "m"


@dataclass
class ScriptedEngine:
    name: str
    poison_status: int | None = 500  # None: the poison is served like any input
    chat_bodies: list[bytes] = field(default_factory=list)  # every chat request it received

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        if path == "/health":
            await _send(send, 200, b"")
        elif path == "/v1/models":
            await _send(send, 200, orjson.dumps({"data": [{"id": MODEL, "max_model_len": 4096}]}))
        elif path == "/v1/chat/completions":
            await self._chat(body, send)
        else:
            await _send(send, 404, b'{"error":{"message":"not found"}}')

    async def _chat(self, body: bytes, send: Any) -> None:
        self.chat_bodies.append(body)
        if self.poison_status is not None and POISON.encode() in body:
            error = {"message": f"{self.name}: failed to process the input", "type": "Internal", "code": 500}
            await _send(send, self.poison_status, orjson.dumps({"error": error}))
            return
        if orjson.loads(body).get("stream"):
            delta = {"choices": [{"index": 0, "delta": {"content": f"hi from {self.name}"}}]}
            frames = b"data: " + orjson.dumps(delta) + b"\n\ndata: [DONE]\n\n"
            await _send(send, 200, frames, b"text/event-stream")
            return
        answer = {
            "id": "x",
            "object": "chat.completion",
            "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": f"hi from {self.name}"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
        }
        await _send(send, 200, orjson.dumps(answer))


async def _send(send: Any, status: int, body: bytes, content_type: bytes = b"application/json") -> None:
    head = [(b"content-type", content_type)]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
