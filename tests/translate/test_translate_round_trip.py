"""A Messages request through the library and a twin engine's chat endpoint, and back: the answers
validate as the anthropic SDK's types, whole and streamed, for text and for a tool loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import pydantic
import pytest

from gateway.sim.fleet import FleetSpec
from gateway.sim.runner import TwinFleet
from gateway.translate import ChatToMessagesStream, chat_to_messages_response, messages_to_chat
from tests.translate.sse_fixtures import anthropic_events

MODEL = "Qwen/Qwen3.6-35B-A3B-FP8"
FLAVORS = ("vllm", "sglang", "llamacpp")
TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    }
]
STREAM_EVENT = pydantic.TypeAdapter(anthropic.types.RawMessageStreamEvent)


@pytest.fixture
async def fleet() -> AsyncIterator[TwinFleet]:
    engines = [
        {"name": f, "flavor": f, "served_model_name": MODEL, "context_length": 4096, "reasoning": True}
        for f in FLAVORS
    ]
    spec = FleetSpec.model_validate({"name": "round-trip", "engines": engines})
    async with TwinFleet(spec, time_scale=200.0, ephemeral_ports=True) as running:
        await running.wait_ready(timeout_s=10)
        yield running


def request(**extra: Any) -> dict[str, Any]:
    body = {"model": "claude-sonnet", "max_tokens": 24, "system": "Be brief.", "temperature": 0}
    body["messages"] = [{"role": "user", "content": "What is the weather in Paris?"}]
    return {**body, **extra}


async def chat_json(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with http.post(url + "/v1/chat/completions", json={**body, "model": MODEL}) as resp:
        assert resp.status == 200, await resp.text()
        answer: dict[str, Any] = await resp.json()
        return answer


async def test_whole_answers_validate_as_anthropic_messages(fleet: TwinFleet) -> None:
    async with aiohttp.ClientSession() as http:
        for name in FLAVORS:
            chat = await chat_json(http, fleet.url(name), messages_to_chat(request()))
            message = anthropic.types.Message.model_validate(chat_to_messages_response(chat, "claude-sonnet"))
            assert [b.type for b in message.content] == ["thinking", "text"], name
            assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 24


async def test_tool_loop_through_the_library(fleet: TwinFleet) -> None:
    async with aiohttp.ClientSession() as http:
        for name in FLAVORS:
            first = await chat_json(http, fleet.url(name), messages_to_chat(request(tools=TOOLS)))
            message = anthropic.types.Message.model_validate(
                chat_to_messages_response(first, "claude-sonnet")
            )
            assert message.stop_reason == "tool_use", name
            call = message.content[-1]
            assert isinstance(call, anthropic.types.ToolUseBlock)
            assert (call.name, call.input) == ("get_weather", {"city": "x", "days": 1})
            # The client runs the tool and sends its result: the engine answers with text.
            turns = [
                *request()["messages"],
                {"role": "assistant", "content": [block.model_dump() for block in message.content]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18C"}],
                },
            ]
            second = await chat_json(
                http, fleet.url(name), messages_to_chat(request(tools=TOOLS, messages=turns))
            )
            answer = anthropic.types.Message.model_validate(
                chat_to_messages_response(second, "claude-sonnet")
            )
            assert answer.stop_reason == "max_tokens" and answer.content[-1].type == "text", name


async def test_streams_translate_to_valid_event_streams(fleet: TwinFleet) -> None:
    async with aiohttp.ClientSession() as http:
        for name in FLAVORS:
            for extra in ({}, {"tools": TOOLS}):
                body = {**messages_to_chat(request(stream=True, **extra)), "model": MODEL}
                stream = ChatToMessagesStream("claude-sonnet")
                out = b""
                async with http.post(fleet.url(name) + "/v1/chat/completions", json=body) as resp:
                    async for line in resp.content:
                        if line.startswith(b"data: "):
                            out += b"".join(stream.feed(line[len(b"data: ") :].strip()))
                out += b"".join(stream.close())
                events = anthropic_events(out)
                for event_name, data in events:
                    if event_name != "ping":
                        STREAM_EVENT.validate_python(data)
                kinds = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
                final = events[-2][1]
                if extra:
                    assert kinds == ["tool_use"] and final["delta"]["stop_reason"] == "tool_use", name
                    parts = [d["delta"]["partial_json"] for n, d in events if n == "content_block_delta"]
                    assert "".join(parts) == '{"city": "x", "days": 1}'
                else:
                    assert kinds == ["thinking", "text"] and final["delta"]["stop_reason"] == "max_tokens", (
                        name
                    )
                    assert final["usage"]["output_tokens"] == 24
