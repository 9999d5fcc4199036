"""The door of the completion routes: depth and count limits, the types routing reads, the content type.

A body the client sent is answered 200 or a clear 400 (415 for a body not declared JSON), never a 500,
and never counted against a backend's breaker."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson
import pytest
from gateway_fakes import AsgiClient, FakeEngine, running_gateway, settings_for

from gateway.api.request_checks import MAX_DEPTH, MAX_MESSAGES, MAX_PARTS, MAX_TOOLS, check_body
from gateway.app import Gateway
from gateway.backends.registry import Registry, Status
from gateway.backends.warmup import Warmups
from gateway.proxy.dispatch import Dispatcher, Job
from gateway.proxy.reliability import Reliability
from gateway.proxy.upstream import MockResponse, MockTransport
from gateway.records import BackendSnapshot
from gateway.routing.request.features import TokenEstimator, extract_features

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
JSON = {"content-type": "application/json"}


def nested(depth: int) -> Any:
    """A value `depth` containers deep: [[...[{}]...]]."""
    value: Any = {}
    for _ in range(depth - 1):
        value = [value]
    return value


async def post(
    url: str, body: Any, headers: Mapping[str, str] = JSON, path: str = "/v1/chat/completions"
) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()  # orjson cannot write 300 deep
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + path, data=data, headers=dict(headers)) as response,
    ):
        raw = await response.read()
        assert response.headers["content-type"].startswith(("application/json", "text/event-stream"))
        return response.status, orjson.loads(raw) if raw.startswith(b"{") else {}


def breakers_untouched(gateway: Gateway) -> None:
    assert gateway.reliability is not None
    for name, state in gateway.reliability.breakers.snapshot().items():
        assert state.state == "closed", name
        assert state.window_failures == 0 and state.consecutive_failures == 0, name


# The checks alone.


def test_nesting_is_limited_at_a_named_depth_far_under_orjsons() -> None:
    assert MAX_DEPTH < 254 // 2
    ok = {**CHAT, "extra": nested(MAX_DEPTH - 1)}  # the body is level 1
    assert check_body(ok) is None
    problem = check_body({**CHAT, "extra": nested(MAX_DEPTH)})
    assert problem == (f"extra: nested deeper than {MAX_DEPTH} levels", "extra")


def test_counts_are_limited() -> None:
    message = {"role": "user", "content": "x"}
    problem = check_body({**CHAT, "messages": [message] * (MAX_MESSAGES + 1)})
    assert problem is not None and problem[1] == "messages"
    assert check_body({**CHAT, "messages": [message] * MAX_MESSAGES}) is None
    tool = {"type": "function", "function": {"name": "f"}}
    problem = check_body({**CHAT, "tools": [tool] * (MAX_TOOLS + 1)})
    assert problem is not None and problem[1] == "tools"
    parts = [{"type": "text", "text": "x"}] * (MAX_PARTS + 1)
    problem = check_body({**CHAT, "messages": [{"role": "user", "content": parts}]})
    assert problem is not None and problem[1] == "messages[0].content"


def test_a_thousand_levels_are_refused_without_recursion() -> None:
    problem = check_body({**CHAT, "tools": [nested(1000)]})
    assert problem is not None and problem[1] == "tools"


# Every field routing/request/features.py (and the route) reads, with every wrong type: the door refuses it or
# the features tolerate it. Never an exception.

WRONG: list[Any] = ["x", "true", None, 0, 7, -1, 1.5, True, [], ["x"], [None], {}, {"a": 1}, nested(300)]
FIELDS = [
    "stream",
    "stream_options",
    "stream_options.include_usage",
    "messages",
    "messages.0",
    "messages.0.content",
    "messages.0.content.0",
    "messages.0.content.0.type",
    "messages.0.content.0.text",
    "messages.0.tool_calls",
    "messages.0.tool_calls.0",
    "messages.0.tool_calls.0.function",
    "messages.0.tool_calls.0.function.arguments",
    "tools",
    "tools.0",
    "prompt",
    "prompt.0",
    "max_tokens",
    "max_completion_tokens",
    "response_format",
    "response_format.type",
    "temperature",
    "n",
]


def with_field(path: str, value: Any) -> dict[str, Any]:
    """A valid chat request (with one content part, one tool call and one tool) with `path` set."""
    body: dict[str, Any] = {
        "model": "m",
        "messages": [
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "hi"}],
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            }
        ],
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "stream_options": {"include_usage": True},
        "response_format": {"type": "text"},
        "prompt": ["a"],
    }
    keys = path.split(".")
    node: Any = body
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return body


@pytest.mark.parametrize("field", FIELDS)
def test_a_wrong_type_is_refused_or_tolerated_never_an_exception(field: str) -> None:
    backends = [BackendSnapshot("a")]
    for value in WRONG:
        body = with_field(field, value)
        if check_body(body) is None:
            extract_features("chat", body, backends, TokenEstimator())


def test_the_wrong_types_the_features_cannot_read_are_400_with_their_param() -> None:
    cases = {
        "stream": ("true", "stream"),
        "messages.0.tool_calls.0.function": ("f", "messages[0].tool_calls[0].function"),
        "tools": ({"type": "function"}, "tools"),
        "tools.0": ("f", "tools"),
        "messages.0": ("hi", "messages[0]"),
        "messages.0.content": (7, "messages[0].content"),
        "messages.0.tool_calls": ({}, "messages[0].tool_calls"),
        "stream_options": ("yes", "stream_options"),
    }
    for field, (value, param) in cases.items():
        problem = check_body(with_field(field, value))
        assert problem is not None and problem[1] == param, field


def test_features_read_a_tool_call_whose_function_is_not_an_object() -> None:
    for function in ("f", None, 7, ["x"]):
        body = with_field("messages.0.tool_calls.0.function", function)
        features = extract_features("chat", body, [BackendSnapshot("a")], TokenEstimator())
        assert features.prompt_tokens > 0


# Through a running gateway.


async def test_deep_nesting_with_an_alias_or_a_stream_is_400_and_no_breaker_counts_it(
    engines: list[FakeEngine],
) -> None:
    deep = {"type": "function", "function": {"name": "f", "parameters": nested(300)}}
    aliased = {**CHAT, "model": "m-alias", "tools": [deep]}
    streamed = {**CHAT, "stream": True, "extra": nested(300)}
    settings = settings_for({"a": engines[0].url, "b": engines[1].url})
    async with running_gateway(settings) as (url, gateway):
        answers = [await post(url, body) for body in [aliased, streamed] * 5]
        breakers_untouched(gateway)
        ok, _ = await post(url, {**CHAT, "model": "m-alias", "stream": True})
    for status, body in answers:
        assert status == 400
        assert body["error"]["type"] == "invalid_request_error"
        assert body["error"]["message"].endswith(f"nested deeper than {MAX_DEPTH} levels")
    assert {body["error"]["param"] for _, body in answers} == {"tools", "extra"}
    assert ok == 200
    assert len(engines[0].bodies) + len(engines[1].bodies) == 1


async def test_a_tool_call_function_that_is_a_string_or_null_is_400(engines: list[FakeEngine]) -> None:
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, gateway):
        answers = [
            await post(url, with_field("messages.0.tool_calls.0.function", value)) for value in ("f", None)
        ]
        breakers_untouched(gateway)
    for status, body in answers:  # null too: a tool call's function must be an object, as engines require
        assert status == 400 and body["error"]["param"] == "messages[0].tool_calls[0].function"


async def test_stream_as_a_string_is_400(engines: list[FakeEngine]) -> None:
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, _):
        status, body = await post(url, {**CHAT, "stream": "true"})
    assert status == 400 and body["error"]["param"] == "stream"
    assert engines[0].bodies == []


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None]
)
async def test_a_body_not_declared_json_is_415(engines: list[FakeEngine], content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, _):
        if content_type is None:  # aiohttp adds application/octet-stream to bytes: send none at all
            status, body = await _post_without_content_type(url, orjson.dumps(CHAT))
        else:
            status, body = await post(url, CHAT, headers)
        completions, _ = await post(url, {"model": "m", "prompt": "hi"}, headers, path="/v1/completions")
    assert status == 415 and completions == 415
    assert body["error"] == {
        "message": "the body must be JSON, sent with `content-type: application/json`",
        "type": "invalid_request_error",
        "param": None,
        "code": "unsupported_media_type",
    }
    assert engines[0].bodies == []


async def test_json_with_a_charset_is_accepted(engines: list[FakeEngine]) -> None:
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, _):
        status, _ = await post(url, CHAT, {"Content-Type": "Application/JSON; charset=utf-8"})
    assert status == 200


async def _post_without_content_type(url: str, data: bytes) -> tuple[int, dict[str, Any]]:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-length: {len(data)}\r\n"
    writer.write(head.encode() + b"connection: close\r\n\r\n" + data)
    await writer.drain()
    raw = await reader.read()
    writer.close()
    status_line, _, rest = raw.partition(b"\r\n")
    return int(status_line.split()[1]), orjson.loads(rest.partition(b"\r\n\r\n")[2])


@pytest.mark.parametrize("field", FIELDS)
async def test_wrong_types_through_the_gateway_are_never_5xx(engines: list[FakeEngine], field: str) -> None:
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, gateway):
        for value in WRONG:
            for model in ("m", "m-alias"):
                body = {**with_field(field, value), "model": model}
                status, _ = await post(url, body)
                assert status in (200, 400), (field, value, model, status)
        breakers_untouched(gateway)


# Defensively, in dispatch: a body that cannot be re-encoded is the client's 400, never a breaker
# failure nor a failover (the door makes it impossible; this holds even without the door).


async def test_an_unencodable_body_is_400_without_touching_a_breaker() -> None:
    sent: list[bytes] = []

    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        sent.append(body)
        return MockResponse(200, [b"{}"])

    settings = settings_for({"a": "http://a.invalid", "b": "http://b.invalid"})
    registry = Registry(settings)
    warmups = Warmups(registry, None)
    reliability = Reliability(settings, warmups)
    registry.listeners += [reliability.on_status, warmups.on_status]
    dispatcher = Dispatcher(registry, MockTransport(handler), max_attempts=2, reliability=reliability)
    for name in ("a", "b"):
        registry.set_status(name, Status.READY)
    body = {**CHAT, "model": "m-alias", "extra": nested(300)}
    job = Job(
        "r",
        "chat",
        "/v1/chat/completions",
        registry.pools[0],
        body,
        b"{}",
        time.perf_counter(),
        "default",
        ("a", "b"),
    )
    client = AsgiClient()
    record = await dispatcher.run(job, client.receive, client.send)
    assert sent == []
    assert client.sent[0]["status"] == 400
    assert orjson.loads(client.sent[1]["body"])["error"]["type"] == "invalid_request_error"
    assert record.status == 400 and record.attempts == 1 and record.failures == []
    for state in reliability.breakers.snapshot().values():
        assert state.window_failures == 0 and state.state == "closed"
