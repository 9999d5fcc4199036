"""A connect timeout says what it is: a backend whose listening socket's backlog is full takes no new
connection (the kernel drops the handshake), so the gateway's connect timeout fires, and the client is
told "connect timeout to backend NAME", not that response headers were late."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
import orjson
from fault_rig import MODEL, gateway_settings, serve_gateway

from gateway.backends.registry import Status
from gateway.proxy.upstream import AiohttpTransport, UpstreamConnectTimeout
from gateway.settings import Timeouts

CONNECT_S = 0.3


@contextmanager
def full_backlog() -> Iterator[str]:
    """A 127.0.0.1 URL whose listener never accepts and whose backlog is already full."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        yield f"http://127.0.0.1:{port}"
    finally:
        for filler in fillers:
            filler.close()
        server.close()


async def test_the_transport_raises_a_connect_timeout_not_a_header_timeout() -> None:
    transport = AiohttpTransport(Timeouts(connect_s=CONNECT_S, first_byte_s=5.0, idle_s=5.0))
    with full_backlog() as url:
        started = time.monotonic()
        try:
            await transport.send(url + "/v1/chat/completions", {}, b"{}")
        except UpstreamConnectTimeout as exc:
            assert f"no connection within {CONNECT_S:g}s" in str(exc)
        else:
            raise AssertionError("a connection was made to a full backlog")
        finally:
            await transport.aclose()
    assert time.monotonic() - started < 2.0  # the connect timeout, not the first-byte one (5 s)


async def test_the_client_is_told_connect_timeout_to_backend_name() -> None:
    with full_backlog() as url:
        settings = gateway_settings(
            {"hidden": url},
            timeouts={"connect_s": CONNECT_S, "first_byte_s": 5.0},
            probe={"interval_s": 30.0, "timeout_s": 10.0},  # no probe verdict within the test
        )
        async with (
            asyncio.timeout(15),
            serve_gateway(settings) as (base, gateway, _),
            aiohttp.ClientSession() as session,
        ):
            gateway.registry.set_status("hidden", Status.READY, "as if it had answered")
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            async with session.post(base + "/v1/chat/completions", json=body) as response:
                status, answer = response.status, orjson.loads(await response.read())
    assert status == 504
    assert answer["error"]["code"] == "connect_timeout"
    assert "connect timeout to backend hidden" in answer["error"]["message"]
    assert "headers" not in answer["error"]["message"]
    assert "127.0.0.1" not in answer["error"]["message"]  # named, never addressed
