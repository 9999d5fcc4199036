"""RequestContext middleware and the body reader."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.api.asgi import REQUEST_ID, STARTED, BodyTooLarge, ClientGone, RequestContext, read_body


async def call(headers: list[tuple[bytes, bytes]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    seen: dict[str, Any] = {}
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.update(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    await RequestContext(app)({"type": "http", "headers": headers}, receive, send)
    return seen, sent


async def test_request_id_is_generated_and_echoed() -> None:
    scope, sent = await call([])
    assert len(scope[REQUEST_ID]) == 32 and STARTED in scope
    assert (b"x-request-id", scope[REQUEST_ID].encode()) in sent[0]["headers"]


async def test_clients_request_id_is_kept() -> None:
    scope, sent = await call([(b"x-request-id", b"abc-1")])
    assert scope[REQUEST_ID] == "abc-1"
    assert (b"x-request-id", b"abc-1") in sent[0]["headers"]


def receiver(*messages: dict[str, Any]) -> Any:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    return receive


async def test_body_in_several_messages_is_joined() -> None:
    receive = receiver(
        {"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.request", "body": b"c"}
    )
    assert await read_body(receive, 10) == b"abc"


async def test_body_over_the_limit_stops_reading() -> None:
    with pytest.raises(BodyTooLarge):
        await read_body(receiver({"type": "http.request", "body": b"x" * 11, "more_body": True}), 10)


async def test_disconnect_while_reading_is_reported() -> None:
    with pytest.raises(ClientGone):
        await read_body(receiver({"type": "http.disconnect"}), 10)
