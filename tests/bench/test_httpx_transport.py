"""The httpx transport that `bench transport` measures, loaded the lazy way the benchmark loads it: it
speaks the transport seam (chunks as they come, failures mapped onto the seam's errors)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from loopback import serve_asgi

from gateway.bench.transport import httpx_missing, httpx_transport
from gateway.proxy.upstream import UpstreamConnectError, UpstreamTimeout
from gateway.settings import Timeouts

FRAMES = [b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"]


async def _streaming_engine(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await receive()
    headers = [(b"content-type", b"text/event-stream")]
    if scope["path"] == "/slow":
        await asyncio.sleep(2)
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for frame in FRAMES:
        await send({"type": "http.response.body", "body": frame, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed again: nothing listens there


def test_httpx_is_reported_present_where_it_is_installed() -> None:
    assert httpx_missing("bench transport") is None


async def test_it_streams_the_engines_bytes_through_the_seam() -> None:
    transport = httpx_transport(Timeouts(), connections=4)
    try:
        async with serve_asgi(_streaming_engine) as (url, _server):
            response = await transport.send(url + "/v1/chat/completions", {}, b"{}")
            assert (response.status, response.content_type) == (200, "text/event-stream")
            body = b"".join([chunk async for chunk in response.iter_chunks()])
        assert body == b"".join(FRAMES)
    finally:
        await transport.aclose()


async def test_a_refused_connection_is_a_connect_error() -> None:
    transport = httpx_transport(Timeouts(connect_s=2), connections=4)
    try:
        with pytest.raises(UpstreamConnectError):
            await transport.send(f"http://127.0.0.1:{_closed_port()}/v1/chat/completions", {}, b"{}")
    finally:
        await transport.aclose()


async def test_no_headers_within_the_first_byte_timeout_is_a_timeout() -> None:
    transport = httpx_transport(Timeouts(first_byte_s=0.2), connections=4)
    try:
        async with serve_asgi(_streaming_engine) as (url, _server):
            with pytest.raises(UpstreamTimeout):
                await transport.send(url + "/slow", {}, b"{}")
    finally:
        await transport.aclose()


async def _control_engine(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers a GET with 503 and the Authorization header it got, after 2 s on /slow."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(2)
    auth = dict(scope["headers"]).get(b"authorization", b"")
    await send({"type": "http.response.start", "status": 503, "headers": []})
    await send({"type": "http.response.body", "body": auth, "more_body": False})


async def test_its_control_plane_get_answers_status_and_body_or_builtin_errors() -> None:
    transport = httpx_transport(Timeouts(), connections=4)
    try:
        async with serve_asgi(_control_engine) as (url, _server):
            answer = await transport.get(url + "/health", {"Authorization": "Bearer k"}, 2.0)
            assert answer == (503, b"Bearer k")
            with pytest.raises(TimeoutError):
                await transport.get(url + "/slow", {}, 0.2)
        with pytest.raises(ConnectionError):
            await transport.get(f"http://127.0.0.1:{_closed_port()}/health", {}, 2.0)
    finally:
        await transport.aclose()
