"""Request limits at the edge of the proxy.

BodySizeLimit: pure-ASGI middleware answering 413 (OpenAI-style body) when a request body is larger than
the limit, judged first by Content-Length and then by counting the streamed body, so an oversized or lying
client is cut off without the gateway ever buffering more than the limit; and 408 when the body has not
arrived `read_timeout_s` after the request reached the app (a body that never completes would otherwise
hold its connection and its task for good). The request head's limits are the protocol's
(api/http_protocol.py).
"""

from __future__ import annotations

import asyncio

from gateway.api.asgi import ASGIApp, Message, Receive, Scope, Send, header
from gateway.api.errors import send_error


class BodySizeLimit:
    """Pure-ASGI middleware: 413 for a request body over `max_bytes`.

    A declared Content-Length over the limit is refused before the app runs. Otherwise the body is counted
    as the app reads it; past the limit the client gets the 413, the app sees a disconnect (so it stops
    reading and never gets the excess), and anything the app sends afterwards is dropped."""

    def __init__(self, app: ASGIApp, max_bytes: int, read_timeout_s: float | None = None) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout_s = read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = header(scope, b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await send_error(send, 400, "Invalid Content-Length header.", "invalid_content_length")
                return
            if int(declared) > self.max_bytes:
                await self.refuse(send)
                return
        await _LimitedExchange(self, receive, send).run(scope)

    async def refuse(self, send: Send) -> None:
        message = f"Request body too large: the limit is {self.max_bytes} bytes."
        await send_error(send, 413, message, "request_too_large", headers=[(b"connection", b"close")])

    async def time_out(self, send: Send) -> None:
        message = f"The request body did not arrive within {self.read_timeout_s:g} s."
        await send_error(send, 408, message, "request_timeout", headers=[(b"connection", b"close")])


class _LimitedExchange:
    """One request through BodySizeLimit: counts the body, remembers whether a response has started."""

    def __init__(self, limit: BodySizeLimit, receive: Receive, send: Send) -> None:
        self._limit = limit
        self._receive = receive
        self._send = send
        self._seen = 0
        self._started = False
        self._refused = False
        self._body_done = False
        timeout = limit.read_timeout_s
        self._deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout

    async def run(self, scope: Scope) -> None:
        await self._limit.app(scope, self.receive, self.send)

    async def receive(self) -> Message:
        if self._refused:
            return {"type": "http.disconnect"}
        if self._body_done or self._deadline is None:
            message = await self._receive()  # past the body: the app waits for a disconnect, untimed
        else:
            try:
                async with asyncio.timeout_at(self._deadline):
                    message = await self._receive()
            except TimeoutError:
                return await self._timed_out()
        if message["type"] == "http.request":
            self._body_done = not message.get("more_body", False)
            self._seen += len(message.get("body", b""))
            if self._seen > self._limit.max_bytes:
                self._refused = True
                if not self._started:
                    self._started = True
                    await self._limit.refuse(self._send)
                return {"type": "http.disconnect"}
        return message

    async def _timed_out(self) -> Message:
        self._refused = True
        if not self._started:
            self._started = True
            await self._limit.time_out(self._send)
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self._refused:
            return
        if message["type"] == "http.response.start":
            self._started = True
        await self._send(message)
