"""The transport seam: how the gateway sends one request to one backend.

`UpstreamTransport.send()` POSTs and returns once the response headers arrive; the body is read with
`read()` or streamed with `iter_chunks()`; `close()` aborts the request (the engine sees the connection
drop and cancels its work). Failures map onto a small exception tree, so dispatch can tell a failure
before the first byte (retry elsewhere) from one in the middle of a body:

    UpstreamError
     +-- UpstreamConnectError   connection refused/reset before the response headers
     +-- UpstreamTimeout        connect, first-byte or idle-gap timeout
     +-- UpstreamBroken         the body ended early (connection dropped mid-stream)

`AiohttpTransport` is the production transport (chosen by measurement: docs/transport.md);
`MockTransport` answers in-process from a handler, for tests without sockets.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp

from gateway.settings import Timeouts


class UpstreamError(Exception):
    pass


class UpstreamConnectError(UpstreamError):
    pass


class UpstreamTimeout(UpstreamError):
    pass


class UpstreamBroken(UpstreamError):
    pass


class UpstreamResponse(Protocol):
    status: int
    content_type: str

    def iter_chunks(self) -> AsyncIterator[bytes]: ...

    async def read(self) -> bytes: ...

    def close(self) -> None: ...


class UpstreamTransport(Protocol):
    async def send(self, url: str, headers: Mapping[str, str], body: bytes) -> UpstreamResponse: ...

    async def aclose(self) -> None: ...


class _AiohttpResponse:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.content_type = response.headers.get("content-type", "application/json")

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        # iter_any, not line iteration: aiohttp >= 3.13 rejects lines over 128 KB in readuntil.
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except TimeoutError as exc:
            raise UpstreamTimeout("no bytes from the backend within the idle timeout") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamBroken(f"the backend's response broke off: {type(exc).__name__}") from exc
        self._response.release()

    async def read(self) -> bytes:
        try:
            body = await self._response.read()
        except TimeoutError as exc:
            raise UpstreamTimeout("no bytes from the backend within the idle timeout") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamBroken(f"the backend's response broke off: {type(exc).__name__}") from exc
        self._response.release()
        return body

    def close(self) -> None:
        # Drops the connection unless the body was read to the end (then it is back in the pool).
        self._response.close()


class AiohttpTransport:
    """aiohttp with an explicit connection pool (keep-alive) and explicit connect/first-byte/idle timeouts."""

    def __init__(self, timeouts: Timeouts, connections: int = 1024) -> None:
        self.timeouts = timeouts
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        # Made lazily so it binds to the running loop (uvicorn's), never to an import-time one.
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._connections, limit_per_host=0, keepalive_timeout=30.0, ttl_dns_cache=300
            )
            # sock_read is the idle gap between two reads of the body (aiohttp resets it on every read).
            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=self.timeouts.connect_s, sock_read=self.timeouts.idle_s
            )
            self._session = aiohttp.ClientSession(connector=connector, timeout=timeout)
        return self._session

    async def send(self, url: str, headers: Mapping[str, str], body: bytes) -> UpstreamResponse:
        session = self._client()
        try:
            async with asyncio.timeout(self.timeouts.first_byte_s):
                response = await session.post(url, data=body, headers=headers)
        except TimeoutError as exc:
            raise UpstreamTimeout(f"no response headers from {url} in time") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamConnectError(f"{type(exc).__name__}: {exc}") from exc
        return _AiohttpResponse(response)

    async def get_text(self, url: str) -> str:
        """GET a small text document (engine /metrics) through the same session and connection pool;
        the caller bounds the time. Raises on a non-200 answer."""
        async with self._client().get(url) as response:
            if response.status != 200:
                raise UpstreamError(f"HTTP {response.status} from {url}")
            return await response.text()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


@dataclass
class MockResponse:
    status: int = 200
    chunks: Iterable[bytes] = ()
    content_type: str = "application/json"
    closed: bool = field(default=False, init=False)

    async def iter_chunks(self) -> AsyncIterator[bytes]:
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
    UpstreamError subclasses to play a failing backend."""

    def __init__(self, handler: MockHandler) -> None:
        self.handler = handler

    async def send(self, url: str, headers: Mapping[str, str], body: bytes) -> UpstreamResponse:
        return await self.handler(url, headers, body)

    async def aclose(self) -> None:
        return None
