"""Request limits and header hygiene at the edges of the proxy.

- BodySizeLimit: pure-ASGI middleware answering 413 (OpenAI-style body) when a request body is larger
  than the limit, judged first by Content-Length and then by counting the streamed body, so an oversized
  or lying client is cut off without the gateway ever buffering more than the limit.
- forward_request_headers / forward_response_headers: strip hop-by-hop headers in both directions
  (RFC 9110 7.6.1: they describe one connection, not the message) and credentials: the client's
  Authorization never reaches a backend (backends get their own configured key), and a backend's
  authentication headers never reach the client.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import AnyStr

from gateway.api.asgi import ASGIApp, Message, Receive, Scope, Send, header
from gateway.api.errors import send_error

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-authentication-info",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Not hop-by-hop, but never forwarded: credentials belong to one side of the proxy. Host and
# Content-Length are set by the upstream client for the (possibly rewritten) body.
_REQUEST_DROP = frozenset({"authorization", "host", "content-length", "cookie"})
_RESPONSE_DROP = frozenset({"www-authenticate", "authentication-info", "set-cookie"})


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _connection_tokens(headers: list[tuple[AnyStr, AnyStr]]) -> set[str]:
    """Header names listed in Connection are hop-by-hop for this message too."""
    named: set[str] = set()
    for name, value in headers:
        if _text(name).lower() == "connection":
            named.update(token.strip().lower() for token in _text(value).split(",") if token.strip())
    return named


def _strip(headers: Iterable[tuple[AnyStr, AnyStr]], extra: frozenset[str]) -> list[tuple[AnyStr, AnyStr]]:
    pairs = list(headers)
    drop = HOP_BY_HOP | extra | _connection_tokens(pairs)
    kept = []
    for name, value in pairs:
        lowered = _text(name).lower()
        if lowered not in drop and not lowered.startswith("proxy-"):
            kept.append((name, value))
    return kept


def forward_request_headers(headers: Iterable[tuple[AnyStr, AnyStr]]) -> list[tuple[AnyStr, AnyStr]]:
    """Client headers that may be sent to a backend (str or bytes pairs, order kept)."""
    return _strip(headers, _REQUEST_DROP)


def forward_response_headers(headers: Iterable[tuple[AnyStr, AnyStr]]) -> list[tuple[AnyStr, AnyStr]]:
    """Backend headers that may be sent to the client (str or bytes pairs, order kept)."""
    return _strip(headers, _RESPONSE_DROP)


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
