"""The ASGI shapes the request path speaks (type aliases) and a whole answer as bytes. Defined here, at
the proxy layer, so dispatch can answer the client without reaching up into the routes; api/asgi.py
re-exports them for the routes and middleware."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def send_bytes(send: Send, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]]) -> None:
    head = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})
