"""Body size limit (413 by header and by stream, never reading past the limit)."""

from __future__ import annotations

from reliability_asgi import call, echo_app

from gateway.api.limits import BodySizeLimit

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
