"""Body size limit (413 by header and by stream, never reading past the limit) and header hygiene."""

from __future__ import annotations

import pytest
from reliability_asgi import call, echo_app

from gateway.api.limits import BodySizeLimit, forward_request_headers, forward_response_headers

LIMIT = 1000


async def test_a_body_within_the_limit_reaches_the_app_whole() -> None:
    response, _ = await call(BodySizeLimit(echo_app(), LIMIT), chunks=[b"x" * 600, b"x" * 400])
    assert (response.status, response.body) == (200, b"1000")


async def test_an_oversized_content_length_is_refused_before_any_body_is_read() -> None:
    response, delivered = await call(
        BodySizeLimit(echo_app(), LIMIT), headers=[("Content-Length", "1001")], chunks=[b"x" * 1001]
    )
    assert response.status == 413
    error = response.json()["error"]
    assert error["code"] == "request_too_large" and str(LIMIT) in error["message"]
    assert delivered == []


async def test_an_oversized_streamed_body_is_cut_off_with_413() -> None:
    chunks = [b"x" * 400] * 10 + [b""]  # 4000 bytes, no Content-Length (chunked upload)
    response, delivered = await call(BodySizeLimit(echo_app(), LIMIT), chunks=chunks)
    assert response.status == 413
    read = [m for m in delivered if m["type"] == "http.request"]
    assert len(read) == 3, "reading stops at the chunk that crosses the limit"


async def test_a_body_longer_than_its_content_length_claims_is_still_cut_off() -> None:
    response, _ = await call(
        BodySizeLimit(echo_app(), LIMIT), headers=[("Content-Length", "10")], chunks=[b"x" * 800, b"x" * 800]
    )
    assert response.status == 413


async def test_a_malformed_content_length_is_a_400() -> None:
    response, _ = await call(BodySizeLimit(echo_app(), LIMIT), headers=[("Content-Length", "12abc")])
    assert response.status == 400


async def test_non_http_scopes_pass_through() -> None:
    seen: list[str] = []

    async def app(scope: dict[str, str], receive: object, send: object) -> None:
        seen.append(scope["type"])

    await BodySizeLimit(app, LIMIT)({"type": "lifespan"}, None, None)
    assert seen == ["lifespan"]


def test_request_headers_lose_hop_by_hop_and_the_client_authorization() -> None:
    headers = [
        ("Content-Type", "application/json"),
        ("Authorization", "Bearer sk-client"),
        ("Connection", "keep-alive, X-Session-Hop"),
        ("Keep-Alive", "timeout=5"),
        ("X-Session-Hop", "1"),
        ("Proxy-Authorization", "Basic abc"),
        ("Proxy-Foo", "bar"),
        ("TE", "trailers"),
        ("Trailer", "Expires"),
        ("Transfer-Encoding", "chunked"),
        ("Upgrade", "h2c"),
        ("Host", "gateway:8080"),
        ("Content-Length", "123"),
        ("X-Request-Id", "abc"),
        ("Accept", "text/event-stream"),
    ]
    assert forward_request_headers(headers) == [
        ("Content-Type", "application/json"),
        ("X-Request-Id", "abc"),
        ("Accept", "text/event-stream"),
    ]


def test_response_headers_lose_hop_by_hop_and_the_backend_auth_headers() -> None:
    headers = [
        (b"content-type", b"text/event-stream"),
        (b"connection", b"close"),
        (b"transfer-encoding", b"chunked"),
        (b"www-authenticate", b"Bearer"),
        (b"proxy-authenticate", b"Basic"),
        (b"x-backend-trace", b"t1"),
    ]
    kept = [(b"content-type", b"text/event-stream"), (b"x-backend-trace", b"t1")]
    assert forward_response_headers(headers) == kept


@pytest.mark.parametrize("direction", [forward_request_headers, forward_response_headers])
def test_headers_named_in_any_connection_header_are_dropped(direction: object) -> None:
    headers = [("Connection", "X-A"), ("connection", "x-b ,"), ("X-A", "1"), ("X-B", "2"), ("X-C", "3")]
    assert direction(headers) == [("X-C", "3")]  # type: ignore[operator]
