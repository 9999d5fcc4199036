"""Limits at the door, through a real gateway served the way `spark-gateway serve` serves it (uvicorn with
gateway/serving.py's options): the request head's size, the time a head or body may take, the body's
counts, and OpenAI-style JSON for every error the server answers itself."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fault_rig import MODEL, fleet_spec, gateway_settings
from loopback import serve_asgi

from gateway.api.auth import hash_key
from gateway.app import build_app, build_gateway
from gateway.bench.malformed import RawAnswer, request, send_raw
from gateway.serving import server_options
from gateway.sim.runner import TwinFleet

CHAT = orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})


@asynccontextmanager
async def door(**limits: Any) -> AsyncIterator[tuple[str, int]]:
    async with TwinFleet(fleet_spec("a"), time_scale=50.0, ephemeral_ports=True) as fleet:
        await fleet.wait_ready(10)
        auth = {"client_key_hashes": [hash_key("sk-client")]}
        settings = gateway_settings({"a": fleet.url("a")}, limits=limits, auth=auth)
        async with serve_asgi(build_app(build_gateway(settings)), **server_options(settings.limits)) as (
            url,
            _,
        ):
            host, port = url.removeprefix("http://").split(":")
            yield host, int(port)


def error(answer: RawAnswer) -> dict[str, Any]:
    assert answer.json_error, answer
    body: dict[str, Any] = orjson.loads(answer.body)["error"]
    return body


KEY = b"Authorization: Bearer sk-client\r\n"


async def test_an_oversize_head_is_431_json_before_auth_and_the_body() -> None:
    async with door(max_head_bytes=8192, max_header_line_bytes=2048) as (host, port):
        one_line = await send_raw(host, port, request(CHAT, extra=b"X-Big: " + b"a" * 4000 + b"\r\n"))
        many = await send_raw(host, port, request(CHAT, extra=b"X-Some: " + b"b" * 1000 + b"\r\n"))
        total = await send_raw(host, port, request(CHAT, extra=(b"X-Some: " + b"b" * 1000 + b"\r\n") * 10))
        huge = await send_raw(host, port, request(CHAT, extra=b"X-Huge: " + b"c" * 3_000_000 + b"\r\n"))
        url = await send_raw(host, port, request(CHAT, path="/v1/chat/completions?" + "q" * 4000))
        fine = await send_raw(host, port, request(CHAT, extra=KEY))
    for answer in (one_line, total, huge):
        assert answer.status == 431  # no key sent: auth would have said 401
        assert error(answer)["code"] == "request_header_fields_too_large"
    assert many.status == 401  # under the limits: on to auth
    assert url.status == 414 and error(url)["code"] == "uri_too_long"
    assert fine.status == 200


async def test_malformed_framing_is_a_json_400_from_the_server() -> None:
    async with door() as (host, port):
        letters = await send_raw(host, port, request(b"{}", length=b"Content-Length: 1x\r\n"))
        twice = await send_raw(
            host, port, request(b"{}", length=b"Content-Length: 2\r\nContent-Length: 2\r\n")
        )
        garbage = await send_raw(host, port, b"\x00\x01 nonsense\r\n\r\n")
    for answer in (letters, twice, garbage):
        assert answer.status == 400
        assert error(answer)["code"] == "invalid_http_request"
        assert error(answer)["type"] == "invalid_request_error"


async def test_a_wrong_method_is_405_with_allow_and_an_unknown_route_404_both_json() -> None:
    async with door() as (host, port):
        wrong = await send_raw(host, port, request(b"", method="GET", extra=KEY))
        unknown = await send_raw(host, port, request(b"", method="GET", path="/v1/nothing", extra=KEY))
    assert wrong.status == 405 and error(wrong)["code"] == "method_not_allowed"
    assert unknown.status == 404 and error(unknown)["code"] == "unknown_url"


async def test_a_body_or_head_that_never_completes_gets_408_and_the_connection_closed() -> None:
    async with door(read_timeout_s=0.5) as (host, port):
        body = await send_raw(host, port, request(CHAT, extra=KEY)[:-5], timeout=10)
        head = await send_raw(host, port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n", timeout=10)
        whole = await send_raw(host, port, request(CHAT, extra=KEY))
    # send_raw reads until the server closes: an answer at all means the connection was closed.
    assert body.status == 408 and error(body)["code"] == "request_timeout"
    assert head.status == 408 and error(head)["code"] == "request_timeout"
    assert whole.status == 200


async def test_the_count_limits_are_settings() -> None:
    many = orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}] * 11})
    async with door(max_messages=10, parse_offload_bytes=0) as (host, port):
        refused = await send_raw(host, port, request(many, extra=KEY))
        await asyncio.sleep(0)
        ok = await send_raw(host, port, request(CHAT, extra=KEY))
    assert refused.status == 400
    assert error(refused)["param"] == "messages" and "limit of 10" in error(refused)["message"]
    assert ok.status == 200


async def test_a_body_of_more_values_than_the_limit_is_a_400_whatever_the_field() -> None:
    zeros = b",".join([b"0"] * 1_500_000)
    unknown = CHAT[:-1] + b',"extra":[' + zeros + b"]}"  # a field no check knows of
    ids = orjson.dumps({"model": MODEL, "max_tokens": 4})[:-1] + b',"prompt":[' + zeros + b"]}"
    async with door() as (host, port):  # the default limit, 1,048,576
        chat = await send_raw(host, port, request(unknown, extra=KEY))
        completions = await send_raw(host, port, request(ids, path="/v1/completions", extra=KEY))
        ok = await send_raw(host, port, request(CHAT, extra=KEY))
    for refused in (chat, completions):
        assert refused.status == 400, refused
        assert "more than 1048576 JSON values" in error(refused)["message"]
    assert ok.status == 200
