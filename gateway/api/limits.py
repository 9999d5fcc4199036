"""Request limits at the edge of the proxy.

BodySizeLimit: pure-ASGI middleware answering 413 (OpenAI-style body) when a request body is larger than
the limit, judged first by Content-Length and then by counting the streamed body, so an oversized or lying
client is cut off without the gateway ever buffering more than the limit.
"""

from __future__ import annotations

from gateway.api.asgi import ASGIApp, Message, Receive, Scope, Send, header
from gateway.api.errors import send_error


class BodySizeLimit:
    """Pure-ASGI middleware: 413 for a request body over `max_bytes`.

    A declared Content-Length over the limit is refused before the app runs. Otherwise the body is counted
    as the app reads it; past the limit the client gets the 413, the app sees a disconnect (so it stops
    reading and never gets the excess), and anything the app sends afterwards is dropped."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self.app = app
        self.max_bytes = max_bytes

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


class _LimitedExchange:
    """One request through BodySizeLimit: counts the body, remembers whether a response has started."""

    def __init__(self, limit: BodySizeLimit, receive: Receive, send: Send) -> None:
        self._limit = limit
        self._receive = receive
        self._send = send
        self._seen = 0
        self._started = False
        self._refused = False

    async def run(self, scope: Scope) -> None:
        await self._limit.app(scope, self.receive, self.send)

    async def receive(self) -> Message:
        if self._refused:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self._seen += len(message.get("body", b""))
            if self._seen > self._limit.max_bytes:
                self._refused = True
                if not self._started:
                    self._started = True
                    await self._limit.refuse(self._send)
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: Message) -> None:
        if self._refused:
            return
        if message["type"] == "http.response.start":
            self._started = True
        await self._send(message)
