"""The httpx upstream transport, measured against aiohttp by `spark-gateway bench transport`.

It lives under gateway/bench/, not gateway/proxy/: it exists to be measured, not to serve. httpx is a
benchmark-only tool (the `bench` extra), so this module is imported only when a benchmark that uses it
runs (`gateway.bench.transport.httpx_transport`); the leading underscore keeps `spark-gateway bench`'s
discovery from importing it at start.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

import httpx

from gateway.proxy.upstream import (
    FirstToken,
    UpstreamBroken,
    UpstreamConnectError,
    UpstreamResponse,
    UpstreamTimeout,
)
from gateway.settings import Timeouts


class _HttpxResponse:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.content_type = response.headers.get("content-type", "application/json")

    async def iter_chunks(self, first_token: FirstToken | None = None) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(str(exc)) from exc
        except httpx.HTTPError as exc:
            raise UpstreamBroken(str(exc)) from exc

    async def read(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx.HTTPError as exc:
            raise UpstreamBroken(str(exc)) from exc

    def close(self) -> None:
        if not self._response.is_closed:
            asyncio.get_running_loop().create_task(self._response.aclose())


class HttpxTransport:
    """httpx with the same explicit pool size and timeouts as the aiohttp transport, and like it a small
    separate client for control-plane GETs (probes, scrapes), so they never queue behind client traffic."""

    def __init__(self, timeouts: Timeouts, connections: int = 1024, control_connections: int = 64) -> None:
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        timeout = httpx.Timeout(connect=timeouts.connect_s, read=timeouts.idle_s, write=30.0, pool=30.0)
        self._client = httpx.AsyncClient(limits=limits, timeout=timeout)
        self._control = httpx.AsyncClient(limits=httpx.Limits(max_connections=control_connections))
        self.first_byte_s = timeouts.first_byte_s

    async def send(self, url: str, headers: Mapping[str, str], body: bytes) -> UpstreamResponse:
        request = self._client.build_request("POST", url, headers=dict(headers), content=body)
        try:
            async with asyncio.timeout(self.first_byte_s):
                response = await self._client.send(request, stream=True)
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise UpstreamTimeout(str(exc)) from exc
        except httpx.HTTPError as exc:
            raise UpstreamConnectError(str(exc)) from exc
        return _HttpxResponse(response)

    async def get(self, url: str, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
        """The seam's control-plane GET: (status, body); TimeoutError or ConnectionError on failure."""
        try:
            async with asyncio.timeout(timeout_s):
                response = await self._control.get(url, headers=dict(headers))
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise TimeoutError(f"GET {url}: no answer within {timeout_s:g}s") from exc
        except httpx.HTTPError as exc:
            raise ConnectionError(f"{type(exc).__name__}: {exc}") from exc
        return response.status_code, response.content

    async def aclose(self) -> None:
        await self._client.aclose()
        await self._control.aclose()
