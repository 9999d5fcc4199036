"""Drive a pure-ASGI app in-process: a scripted request body, the response collected as plain data."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.api.asgi import ASGIApp, Message


@dataclass
class Response:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def json(self) -> Any:
        return orjson.loads(self.body)


async def call(
    app: ASGIApp,
    path: str = "/v1/chat/completions",
    headers: Sequence[tuple[str, str]] = (),
    chunks: Sequence[bytes] = (b"",),
    method: str = "POST",
) -> tuple[Response, list[Message]]:
    """Run one request; returns the response and every message the app's receive() handed out."""
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
    }
    last = len(chunks) - 1
    pending = [{"type": "http.request", "body": c, "more_body": i < last} for i, c in enumerate(chunks)]
    delivered: list[Message] = []
    response = Response()

    async def receive() -> Message:
        message = pending.pop(0) if pending else {"type": "http.disconnect"}
        delivered.append(message)
        return message

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            assert response.status == 0, "response started twice"
            response.status = message["status"]
            response.headers = {k.decode(): v.decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            response.body += message.get("body", b"")

    await app(scope, receive, send)
    return response, delivered


def echo_app(seen: list[dict[str, Any]] | None = None) -> ASGIApp:
    """An app that reads the whole body and answers 200 with its size; records each scope it served."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if seen is not None:
            seen.append(dict(scope))
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(size).encode()})

    return app
