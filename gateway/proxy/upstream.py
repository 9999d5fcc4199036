"""The transport seam: how the gateway sends one request to one backend.

`UpstreamTransport.send()` POSTs and returns once the response headers arrive; the body is read with
`read()` or streamed with `iter_chunks()`; `close()` aborts the request (the engine sees the connection
drop and cancels its work). Failures map onto a small exception tree, so dispatch can tell a failure
before the first byte (retry elsewhere) from one in the middle of a body:

    UpstreamError
     +-- UpstreamConnectError   connection refused/reset before the response headers
     |    +-- UpstreamRefused   no connection at all (proof that nothing listens: passive health)
     +-- UpstreamTimeout        first-token or idle-gap timeout
     |    +-- UpstreamConnectTimeout   no connection within the connect timeout
     +-- UpstreamBroken         the body ended early (connection dropped mid-stream)

Two read timeouts, because waiting for the first token and waiting between tokens are different things:
- first token (`first_byte_s`, generous): from the moment the request is sent until the response headers
  and then the first content chunk. It covers the engine's own queue and a long prefill; engines send the
  headers (and vLLM an empty role frame) long before that, so the body's first bytes do not end it. The
  caller says when content has arrived (`iter_chunks(first_token)`): the transport cannot tell a role or
  keep-alive frame from a token without parsing, and the caller parses anyway.
- idle gap (`idle_s`): after the first content chunk, the longest silence between two reads.

`get()` is the control plane's GET (readiness probes, capability discovery, engine /metrics): status and
body under one overall timeout, failures as builtin TimeoutError and OSError, because its callers (the
prober and the scraper, gateway/backends/fetch.py) sit below this layer and cannot know its exceptions.

Failure messages never quote the URL nor the host and port (`_cause`): they reach clients inside error
bodies ("no backend answered: NAME: ..."), where a backend is named by its configured name only, and a
URL may carry credentials.

`AiohttpTransport` is the production transport (chosen by measurement: docs/transport.md);
`MockTransport` answers in-process from a handler, for tests without sockets.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp

from gateway.backends.fetch import Fetch
from gateway.settings import Timeouts


class UpstreamError(Exception):
    pass


class UpstreamConnectError(UpstreamError):
    pass


class UpstreamRefused(UpstreamConnectError):
    """No connection could be made at all: nothing listens there (the process is gone or restarting)."""


class UpstreamTimeout(UpstreamError):
    pass


class UpstreamConnectTimeout(UpstreamTimeout):
    """No connection within the connect timeout (a host that drops the handshake, a full backlog)."""


class UpstreamBroken(UpstreamError):
    pass


FirstToken = Callable[[], bool]  # True once the chunks read so far carried content (a token)


class UpstreamResponse(Protocol):
    status: int
    content_type: str

    def iter_chunks(self, first_token: FirstToken | None = None) -> AsyncIterator[bytes]: ...

    async def read(self) -> bytes: ...

    def close(self) -> None: ...


class UpstreamTransport(Protocol):
    async def send(self, url: str, headers: Mapping[str, str], body: bytes) -> UpstreamResponse: ...

    async def get(self, url: str, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]: ...

    async def aclose(self) -> None: ...


class _AiohttpResponse:
    def __init__(self, response: aiohttp.ClientResponse, first_deadline: float, idle_s: float) -> None:
        self._response = response
        self.status = response.status
        self.content_type = response.headers.get("content-type", "application/json")
        self._first_deadline = first_deadline  # loop time by which the first content must have come
        self._idle_s = idle_s

    async def iter_chunks(self, first_token: FirstToken | None = None) -> AsyncIterator[bytes]:
        """The body as it arrives. Until `first_token()` says content came (or, without it, until the
        first bytes), each read is bounded by what is left of the first-token budget; after that, by
        the idle gap. The bound covers the read only, never the caller's work between two chunks."""
        content = self._response.content
        loop = asyncio.get_running_loop()
        waiting = True
        try:
            while True:
                deadline = self._first_deadline if waiting else loop.time() + self._idle_s
                try:
                    # iter_any-style reads, not lines: aiohttp >= 3.13 rejects lines over 128 KB.
                    async with asyncio.timeout_at(deadline):
                        chunk = await content.readany()
                except TimeoutError as exc:
                    raise UpstreamTimeout(_silence(waiting, self._idle_s)) from exc
                if not chunk:
                    break
                yield chunk
                # Asked after the caller has read the chunk: the one carrying the first token ends the wait.
                waiting = waiting and not (first_token() if first_token is not None else True)
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamBroken(f"the backend's response broke off: {type(exc).__name__}") from exc
        self._response.release()

    async def read(self) -> bytes:
        """The whole body: it is the first content, so the first-token budget applies, and at least
        one idle gap once the headers are in."""
        deadline = max(self._first_deadline, asyncio.get_running_loop().time() + self._idle_s)
        try:
            async with asyncio.timeout_at(deadline):
                body = await self._response.read()
        except TimeoutError as exc:
            raise UpstreamTimeout("the backend's response body did not arrive in time") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamBroken(f"the backend's response broke off: {type(exc).__name__}") from exc
        self._response.release()
        return body

    def close(self) -> None:
        # Drops the connection unless the body was read to the end (then it is back in the pool).
        self._response.close()


def _cause(exc: BaseException) -> str:
    """What went wrong, without where: the exception's type and, for an OS-level failure, the standard
    text of its error number ("ClientConnectorError: Connection refused"). Never `str(exc)`: aiohttp's
    messages name the host and port ("Cannot connect to host 10.0.0.5:8000 ..."), the OS error's own
    message the address ("Connect call failed ('10.0.0.5', 8000)"), and InvalidURL the whole URL."""
    found = getattr(exc, "os_error", None) or exc
    reason = None
    if isinstance(found, socket.gaierror):
        reason = found.strerror  # the resolver's text for its code, e.g. "Name or service not known"
    elif isinstance(found, OSError) and isinstance(found.errno, int) and found.errno > 0:
        reason = os.strerror(found.errno)
    return f"{type(exc).__name__}: {reason}" if reason else type(exc).__name__


def _silence(waiting_for_first: bool, idle_s: float) -> str:
    if waiting_for_first:
        return "no first token from the backend within the first-token timeout"
    return f"no bytes from the backend for {idle_s:g}s (idle timeout)"


class AiohttpTransport:
    """aiohttp with an explicit connection pool (keep-alive) and explicit connect/first-byte/idle timeouts.

    Control-plane GETs (`get`) go through a second, small session of their own: with every client
    connection of the main pool busy (long generations hold theirs for minutes), a readiness probe or a
    /metrics scrape would otherwise wait for a free one, and a backend that is merely busy would look
    hung to the prober. The two pools never share a connection, so probes never queue behind client
    traffic."""

    def __init__(self, timeouts: Timeouts, connections: int = 1024, control_connections: int = 64) -> None:
        self.timeouts = timeouts
        self._connections = connections
        self._control_connections = control_connections
        self._session: aiohttp.ClientSession | None = None
        self._control: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        # Made lazily so it binds to the running loop (uvicorn's), never to an import-time one.
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._connections, limit_per_host=0, keepalive_timeout=30.0, ttl_dns_cache=300
            )
            # No sock_read: the responses time their own reads (first token, then idle gap).
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeouts.connect_s)
            self._session = aiohttp.ClientSession(connector=connector, timeout=timeout)
        return self._session

    async def send(self, url: str, headers: Mapping[str, str], body: bytes) -> UpstreamResponse:
        session = self._client()
        first_deadline = asyncio.get_running_loop().time() + self.timeouts.first_byte_s
        try:
            async with asyncio.timeout_at(first_deadline):
                response = await session.post(url, data=body, headers=headers)
        except aiohttp.ConnectionTimeoutError as exc:  # a TimeoutError too: asked first
            raise UpstreamConnectTimeout(f"no connection within {self.timeouts.connect_s:g}s") from exc
        except TimeoutError as exc:
            raise UpstreamTimeout("no response headers from the backend in time") from exc
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamRefused(_cause(exc)) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamConnectError(_cause(exc)) from exc
        return _AiohttpResponse(response, first_deadline, self.timeouts.idle_s)

    async def get(self, url: str, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
        """GET a small document through the control-plane pool: (status, body), any status. Raises
        TimeoutError when connect, headers and body together take longer than `timeout_s`, an OSError
        (ConnectionError when aiohttp's own error is not one) when no answer comes."""
        if self._control is None:  # lazily, like the main session: bound to the running loop
            self._control = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._control_connections)
            )
        try:
            async with asyncio.timeout(timeout_s), self._control.get(url, headers=headers) as response:
                return response.status, await response.read()
        except TimeoutError:
            raise  # aiohttp's own timeouts are TimeoutErrors too
        except aiohttp.ClientError as exc:
            if isinstance(exc, OSError):  # e.g. ClientConnectorError: refused, unreachable
                raise
            raise ConnectionError(_cause(exc)) from exc

    async def aclose(self) -> None:
        for session in (self._session, self._control):
            if session is not None:
                await session.close()
        self._session = self._control = None


@dataclass
class MockResponse:
    status: int = 200
    chunks: Iterable[bytes] = ()
    content_type: str = "application/json"
    closed: bool = field(default=False, init=False)

    async def iter_chunks(self, first_token: FirstToken | None = None) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            if self.closed:
                return
            yield chunk

    async def read(self) -> bytes:
        return b"".join(self.chunks)

    def close(self) -> None:
        self.closed = True


MockHandler = Callable[[str, Mapping[str, str], bytes], Awaitable[MockResponse]]


class MockTransport:
    """Answers every request in-process from `handler(url, headers, body)`; the handler may raise
    UpstreamError subclasses to play a failing backend. GETs (probes, scrapes) go to `get_handler`, a
    `Fetch`; without one nothing answers them (ConnectionRefusedError), as if nothing listened."""

    def __init__(self, handler: MockHandler, get_handler: Fetch | None = None) -> None:
        self.handler = handler
        self.get_handler = get_handler

    async def send(self, url: str, headers: Mapping[str, str], body: bytes) -> UpstreamResponse:
        return await self.handler(url, headers, body)

    async def get(self, url: str, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
        if self.get_handler is None:
            raise ConnectionRefusedError(f"MockTransport has no GET handler for {url}")
        return await self.get_handler(url, headers, timeout_s)

    async def aclose(self) -> None:
        return None
