"""The HTTP/1.1 protocol the gateway serves with: uvicorn's httptools protocol with limits on the request
head and OpenAI-style JSON for the errors the protocol answers itself.

uvicorn's own protocol answers a request it cannot parse (a malformed or duplicate Content-Length, a bad
request line) with a text/plain 400 the app never sees, and takes a request head of any size: a 50 MB
header is buffered, then served. Here, before the app runs (so before auth and before any body is read):

- a request line or one header line over `max_line` bytes, or a head over `max_head` bytes, is a 431
  `request_header_fields_too_large`; an unfinished head is judged by the bytes received so far, so
  at most one read past the limit is ever buffered;
- a head not complete `read_timeout_s` after its first byte is a 408 `request_timeout` (a client that
  trickles its headers cannot hold a connection forever);
- what the parser refuses is a 400 `invalid_http_request` naming the parser's reason.

Client connections are held under a cap (api/connections.py): past it the connection idle the longest
is closed, or, when every one is serving a request, the newcomer is answered 503 `too_many_connections`.

Each answer is JSON, closes the connection, and is logged as one line without the client's bytes. The
close lingers: the gateway half-closes and reads (and drops) what the client is still sending, up to
`_LINGER_BYTES` or `_LINGER_S`, since closing a socket with unread input resets the connection and the
client would lose the answer (a client still sending after that gets the reset).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gateway.api.connections import ConnectionCap
from gateway.proxy.errors import error_body

log = logging.getLogger("gateway.http")

_LINGER_BYTES = 4 * 1024 * 1024
_LINGER_S = 2.0


@dataclass(frozen=True, slots=True)
class HeadLimits:
    max_head: int = 64 * 1024
    max_line: int = 16 * 1024
    read_timeout_s: float = 30.0


class _Refused(Exception):
    """Raised from a parser callback: the head broke a limit (the protocol answers, then closes)."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with head limits and JSON protocol errors; `limits` is set by `http_protocol`."""

    limits = HeadLimits()
    cap: ConnectionCap | None = None  # None: connections are not capped (tests that build one bare)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last_active = self.loop.time()
        self._in_head = False
        self._head_seen = 0  # raw bytes received for an unfinished head
        self._head_counted = 0  # request line + header lines parsed so far
        self._head_timer: asyncio.TimerHandle | None = None
        self._discard_left: int | None = None  # set once refused: input is dropped until the close

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()  # a connection that never sends a full head is closed too
        cap = self.cap
        if cap is not None and not cap.admit(self.connections, self):
            message = "The gateway is serving as many connections as it can; retry shortly."
            self._answer(_Refused(503, message, "too_many_connections"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)
        if self.cap is not None:
            self.cap.open = len(self.connections)

    def is_idle(self) -> bool:
        """No request in progress: never sent a byte, between two requests, or closing."""
        if self._discard_left is not None:
            return True
        return not self._in_head and (self.cycle is None or self.cycle.response_complete)

    def close(self) -> None:
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.last_active = self.loop.time()
        if self._discard_left is not None:
            self._discard_left -= len(data)
            if self._discard_left < 0:
                self.transport.close()
            return
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # as uvicorn's own protocol does
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError as exc:
            refused = exc.__context__ if isinstance(exc.__context__, _Refused) else None
            if refused is None:
                reason = str(exc) or "malformed request"
                refused = _Refused(400, f"Invalid HTTP request: {reason}.", "invalid_http_request")
            self._answer(refused)
            return
        if self._in_head:
            self._head_seen += len(data)
            if self._head_seen > self.limits.max_head:
                self._answer(self._head_too_large())

    # Parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_seen = 0
        self._head_counted = 0
        self._arm_head_timer()

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._check_url(len(self.url))

    def on_header(self, name: bytes, value: bytes) -> None:
        line = len(name) + len(value) + 4  # "name: value\r\n"
        if line > self.limits.max_line:
            raise _Refused(431, f"A header line is over {self.limits.max_line} bytes.", _HEAD_CODE)
        self._head_counted += line
        if self._head_counted > self.limits.max_head:
            raise self._head_too_large()
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm_head_timer()
        super().on_headers_complete()

    def _check_url(self, url_bytes: int) -> None:
        if url_bytes > self.limits.max_line:
            raise _Refused(414, f"The request line is over {self.limits.max_line} bytes.", "uri_too_long")

    def _head_too_large(self) -> _Refused:
        return _Refused(431, f"The request headers are over {self.limits.max_head} bytes.", _HEAD_CODE)

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.limits.read_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._discard_left is not None:
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a request is being served (its body read has its own deadline)
        if self._in_head:
            message = f"The request headers did not arrive within {self.limits.read_timeout_s:g} s."
            self._answer(_Refused(408, message, "request_timeout"))
        else:
            self.transport.close()  # connected, never sent a request

    def _answer(self, refused: _Refused) -> None:
        """A whole JSON error response, then close: the parser's state is unknown past an error."""
        self._disarm_head_timer()
        if self.transport.is_closing():
            return
        log.info("refused a request from %s: %d %s", _client(self.client), refused.status, refused.code)
        body = error_body(refused.status, str(refused), refused.code)
        head = [STATUS_LINE[refused.status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: ",
            str(len(body)).encode(),
            b"\r\nconnection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self._discard_left = _LINGER_BYTES
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._head_timer = self.loop.call_later(_LINGER_S, self.transport.close)


_HEAD_CODE = "request_header_fields_too_large"


def _client(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "-"


def http_protocol(limits: HeadLimits, cap: ConnectionCap | None = None) -> type[LimitedHttpToolsProtocol]:
    """The protocol class for `uvicorn.Config(http=...)`, with these limits and this connection cap (a
    subclass per server)."""
    return type("GatewayHttpProtocol", (LimitedHttpToolsProtocol,), {"limits": limits, "cap": cap})
