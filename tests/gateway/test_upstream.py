"""AiohttpTransport: failures map onto the seam's exceptions; close() drops the upstream connection."""

from __future__ import annotations

import asyncio
import socket

import pytest
from gateway_fakes import FakeEngine

from gateway.proxy.upstream import (
    AiohttpTransport,
    UpstreamBroken,
    UpstreamConnectError,
    UpstreamRefused,
    UpstreamTimeout,
)
from gateway.settings import Timeouts

HEADERS = {"content-type": "application/json"}
BODY = b'{"model":"m","messages":[],"stream":true}'


def transport(**timeouts: float) -> AiohttpTransport:
    return AiohttpTransport(Timeouts(**{"connect_s": 1.0, "first_byte_s": 2.0, "idle_s": 2.0, **timeouts}))


async def test_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1/chat/completions"
    upstream = transport()
    with pytest.raises(UpstreamConnectError):
        await upstream.send(url, HEADERS, BODY)
    await upstream.aclose()


async def test_failure_messages_name_neither_the_address_nor_the_credentials(
    engines: list[FakeEngine],
) -> None:
    # They reach clients ("no backend answered: NAME: <message>"): the backend is named by its name only.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    upstream = transport(first_byte_s=0.2)
    engines[0].behaviour.hang = True
    hung = engines[0].url.replace("http://", "http://gw:pw-SECRET@")
    try:
        with pytest.raises(UpstreamRefused) as refused:
            await upstream.send(f"http://gw:pw-SECRET@127.0.0.1:{port}/v1/chat/completions", HEADERS, BODY)
        with pytest.raises(UpstreamTimeout) as timed_out:
            await upstream.send(hung + "/v1/chat/completions", HEADERS, BODY)
    finally:
        await upstream.aclose()
    assert str(refused.value) == "ClientConnectorError: Connection refused"
    for message in (str(refused.value), str(timed_out.value)):
        assert "127.0.0.1" not in message and str(port) not in message
        assert engines[0].url.rpartition(":")[2] not in message
        assert "pw-SECRET" not in message and "gw" not in message


async def test_no_headers_in_time_is_a_timeout(engines: list[FakeEngine]) -> None:
    engines[0].behaviour.hang = True
    upstream = transport(first_byte_s=0.2)
    with pytest.raises(UpstreamTimeout):
        await upstream.send(engines[0].url + "/v1/chat/completions", HEADERS, BODY)
    await upstream.aclose()


async def test_idle_gap_in_a_stream_is_a_timeout(engines: list[FakeEngine]) -> None:
    engines[0].behaviour.gap_s = 0.5
    upstream = transport(idle_s=0.2)
    response = await upstream.send(engines[0].url + "/v1/chat/completions", HEADERS, BODY)
    with pytest.raises(UpstreamTimeout):
        async for _ in response.iter_chunks():
            pass
    response.close()
    await upstream.aclose()


async def test_the_idle_gap_starts_with_the_first_token(engines: list[FakeEngine]) -> None:
    # The first token arrives at once, then the engine goes quiet for longer than the idle gap: the next
    # read must already be bounded by the idle gap, not by what is left of the first-token budget.
    engines[0].behaviour.gap_s = 0.5
    upstream = transport(first_byte_s=2.0, idle_s=0.2)
    response = await upstream.send(engines[0].url + "/v1/chat/completions", HEADERS, BODY)
    seen: list[bytes] = []

    def first_token() -> bool:
        return b'"content":"t' in b"".join(seen)

    with pytest.raises(UpstreamTimeout, match="idle timeout"):
        async for chunk in response.iter_chunks(first_token):
            seen.append(chunk)
    assert b"t0 " in b"".join(seen) and b"t1 " not in b"".join(seen)
    response.close()
    await upstream.aclose()


async def test_dropped_connection_mid_body_is_broken(engines: list[FakeEngine]) -> None:
    engines[0].behaviour.drop_after = 1
    upstream = transport()
    response = await upstream.send(engines[0].url + "/v1/chat/completions", HEADERS, BODY)
    with pytest.raises(UpstreamBroken):
        async for _ in response.iter_chunks():
            pass
    await upstream.aclose()


async def test_close_mid_stream_cancels_the_engine_request(engines: list[FakeEngine]) -> None:
    engines[0].behaviour.tokens = 1000
    engines[0].behaviour.gap_s = 0.01
    upstream = transport()
    response = await upstream.send(engines[0].url + "/v1/chat/completions", HEADERS, BODY)
    async for _ in response.iter_chunks():
        break
    response.close()
    async with asyncio.timeout(5):
        while engines[0].cancelled == 0:
            await asyncio.sleep(0.02)
    await upstream.aclose()


async def test_a_fully_read_response_is_answered_with_status_and_type(engines: list[FakeEngine]) -> None:
    upstream = transport()
    response = await upstream.send(engines[0].url + "/v1/chat/completions", HEADERS, b'{"model":"m"}')
    assert response.status == 200 and response.content_type.startswith("application/json")
    assert b'"usage"' in await response.read()
    await upstream.aclose()


async def test_control_plane_get_answers_any_status_with_its_body(engines: list[FakeEngine]) -> None:
    engines[0].behaviour.health_status = 503
    engines[0].behaviour.health_body = {"error": {"message": "Loading model"}}
    upstream = transport()
    try:
        status, body = await upstream.get(engines[0].url + "/health", {"Authorization": "Bearer k"}, 2.0)
    finally:
        await upstream.aclose()
    assert status == 503 and b"Loading model" in body


async def test_control_plane_get_fails_with_builtin_errors() -> None:
    upstream = transport()
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        with pytest.raises(TimeoutError):
            await upstream.get(f"http://127.0.0.1:{silent.getsockname()[1]}/health", {}, 0.2)
        closed = f"http://127.0.0.1:{silent.getsockname()[1]}/health"
    with pytest.raises(OSError) as refused:
        await upstream.get(closed, {}, 2.0)
    assert not isinstance(refused.value, TimeoutError)
    await upstream.aclose()


async def test_control_plane_get_never_queues_behind_client_traffic(engines: list[FakeEngine]) -> None:
    # One client connection, held by a slow stream: a GET through the client pool would wait for it.
    engines[0].behaviour.tokens = 50
    engines[0].behaviour.gap_s = 0.1
    upstream = AiohttpTransport(Timeouts(connect_s=1.0, first_byte_s=2.0, idle_s=2.0), connections=1)
    try:
        response = await upstream.send(engines[0].url + "/v1/chat/completions", HEADERS, BODY)
        status, _ = await upstream.get(engines[0].url + "/health", {}, 1.0)
        assert status == 200
        response.close()
    finally:
        await upstream.aclose()
