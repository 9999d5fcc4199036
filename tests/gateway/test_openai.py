"""The client-facing routes, end to end through uvicorn against fake engines."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
from gateway_fakes import FakeEngine, running_gateway, settings_for
from multidict import CIMultiDict

from gateway.backends.registry import Status

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
JSON = {"content-type": "application/json"}


async def post(url: str, body: Any, raw: bytes | None = None) -> tuple[int, CIMultiDict[str], bytes]:
    data = raw if raw is not None else orjson.dumps(body)
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/chat/completions", data=data, headers=JSON) as response,
    ):
        return response.status, CIMultiDict(response.headers), await response.read()


async def test_non_stream_answer_carries_gateway_headers(engines: list[FakeEngine]) -> None:
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, _):
        status, headers, body = await post(url, CHAT)
    assert status == 200
    assert orjson.loads(body)["usage"]["completion_tokens"] == 3
    assert headers["x-gateway-backend"] == "a"
    assert headers["x-gateway-profile"] == "default"
    assert headers["x-request-id"]
    assert float(headers["x-gateway-overhead-ms"]) >= 0


async def test_every_request_field_reaches_the_engine_untouched(engines: list[FakeEngine]) -> None:
    request = {
        **CHAT,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": "auto",
        "response_format": {"type": "json_object"},
        "reasoning_effort": "high",
        "chat_template_kwargs": {"enable_thinking": False},
        "top_k": 20,
    }
    raw = orjson.dumps(request)
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, _):
        await post(url, None, raw=raw)
    assert engines[0].bodies == [request]


async def test_non_stream_request_never_gets_stream_options(engines: list[FakeEngine]) -> None:
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, _):
        await post(url, CHAT)
    assert "stream_options" not in engines[0].bodies[0]


async def test_alias_is_rewritten_to_the_backends_served_name(engines: list[FakeEngine]) -> None:
    settings = settings_for(
        {"a": engines[0].url},
        pools=[{"model": "m", "aliases": ["m-alias"], "backends": ["a"], "served_names": {"a": "org/m-fp8"}}],
    )
    async with running_gateway(settings) as (url, _):
        status, _, _ = await post(url, {**CHAT, "model": "m-alias"})
    assert status == 200
    assert engines[0].bodies[0]["model"] == "org/m-fp8"


async def test_unknown_model_is_404_listing_the_models(engines: list[FakeEngine]) -> None:
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, _):
        status, _, body = await post(url, {**CHAT, "model": "nope"})
    assert status == 404
    error = orjson.loads(body)["error"]
    assert error["code"] == "model_not_found" and "Available models: m" in error["message"]


async def test_malformed_json_is_400(engines: list[FakeEngine]) -> None:
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, _):
        status, _, body = await post(url, None, raw=b"{not json")
    assert status == 400
    assert orjson.loads(body)["error"]["type"] == "invalid_request_error"


async def test_messages_not_a_list_is_400(engines: list[FakeEngine]) -> None:
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, _):
        status, _, body = await post(url, {"model": "m", "messages": "hi"})
    assert status == 400
    assert orjson.loads(body)["error"]["param"] == "messages"


async def test_body_over_the_limit_is_413(engines: list[FakeEngine]) -> None:
    settings = settings_for({"a": engines[0].url}, limits={"max_body_bytes": 2048})
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
    async with running_gateway(settings) as (url, _):
        status, _, _ = await post(url, big)
    assert status == 413
    assert engines[0].bodies == []


async def test_models_lists_pools_with_their_largest_context(engines: list[FakeEngine]) -> None:
    engines[1].max_model_len = 65536
    async with (
        running_gateway(settings_for({"a": engines[0].url, "b": engines[1].url})) as (url, _),
        aiohttp.ClientSession() as session,
        session.get(url + "/v1/models") as response,
    ):
        cards = (await response.json())["data"]
    assert [(c["id"], c["max_model_len"], c["aliases"]) for c in cards] == [("m", 65536, ["m-alias"])]


async def test_completions_route_forwards_to_the_engines_completions(engines: list[FakeEngine]) -> None:
    body = {"model": "m", "prompt": "hi"}
    async with (
        running_gateway(settings_for({"a": engines[0].url})) as (url, _),
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/completions", json=body) as response,
    ):
        assert response.status == 200
    assert engines[0].bodies == [{"model": "m", "prompt": "hi"}]


async def test_no_ready_backend_is_503_with_retry_after(engines: list[FakeEngine]) -> None:
    engines[0].behaviour.health_status = 503
    async with running_gateway(settings_for({"a": engines[0].url}), wait_ready=False) as (url, gateway):
        # Until its first probe the backend is "unknown", i.e. possibly warming up, and a request would
        # wait in the queue for it: post only once the prober has judged it (a vLLM 503: dead).
        async with asyncio.timeout(5):
            while gateway.registry.backends["a"].status is not Status.DEAD:
                await asyncio.sleep(0.01)
        status, headers, body = await post(url, CHAT)
    assert status == 503
    assert headers["retry-after"] == "5"
    assert orjson.loads(body)["error"]["code"] in {"no_ready_backend"}
