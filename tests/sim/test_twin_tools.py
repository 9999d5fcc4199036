"""The twin's deterministic tool call: a client's tool loop runs end to end in chat, Messages and
Responses shapes on every flavor."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import openai
import pytest

from gateway.sim.tools import function_tools, plan_tool_call
from tests.sim.conftest import MODEL, FleetFactory, chat, engine_spec, stream

FLAVORS = ("vllm", "sglang", "llamacpp")
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"},
        "detail": {"type": "boolean"},
    },
    "required": ["city", "unit", "days"],
}
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
ARGUMENTS = {"city": "x", "unit": "celsius", "days": 1}


def test_arguments_fill_each_required_property_from_its_schema() -> None:
    nested = {
        "type": "object",
        "properties": {
            "where": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]}
        },
        "required": ["where"],
    }
    call = plan_tool_call([{"role": "user"}], [{"name": "f", "parameters": nested}], "auto", "id-1")
    assert call is not None and json.loads(call.arguments) == {"where": {"lat": 1}}
    assert "".join(call.argument_pieces) == call.arguments and call.tokens == 1 + len(call.argument_pieces)


def test_tool_choice_and_a_tool_result_decide_whether_to_call() -> None:
    tools = function_tools(CHAT_TOOLS)
    user = [{"role": "user", "content": "hi"}]
    assert plan_tool_call(user, tools, "none", "i") is None
    assert plan_tool_call([*user, {"role": "tool", "content": "18C"}], tools, "auto", "i") is None
    named = plan_tool_call(user, tools, {"type": "function", "function": {"name": "get_time"}}, "i")
    assert named is not None and named.name == "get_time" and named.arguments == "{}"


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_chat_tool_loop_with_the_openai_client(twin: FleetFactory, flavor: str) -> None:
    async with twin(engine_spec("e", flavor, reasoning=True)) as fleet:
        client = openai.AsyncOpenAI(base_url=fleet.url("e") + "/v1", api_key="unused", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
        first = await client.chat.completions.create(model=MODEL, messages=messages, tools=CHAT_TOOLS)
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
        call = choice.message.tool_calls[0]
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == ARGUMENTS
        assert first.usage is not None and first.usage.completion_tokens > 1
        messages += [
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "18C"},
        ]
        second = await client.chat.completions.create(
            model=MODEL, messages=messages, tools=CHAT_TOOLS, max_tokens=8
        )
    assert second.choices[0].finish_reason == "length" and second.choices[0].message.content
    assert not second.choices[0].message.tool_calls


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_streamed_tool_call_deltas_assemble_to_the_call(
    twin: FleetFactory, http: aiohttp.ClientSession, flavor: str
) -> None:
    async with twin(engine_spec("e", flavor)) as fleet:
        body = chat("Weather?", tools=CHAT_TOOLS, stream=True, stream_options={"include_usage": True})
        events = await stream(http, fleet.url("e") + "/v1/chat/completions", body)
    calls = [
        c
        for e in events[1:]
        if isinstance(e, dict)
        for ch in e["choices"]
        for c in ch["delta"].get("tool_calls") or []
    ]
    assert calls[0]["id"] and calls[0]["function"]["name"] == "get_weather" and calls[0]["type"] == "function"
    assert json.loads("".join(c["function"]["arguments"] or "" for c in calls)) == ARGUMENTS
    finish = [
        ch["finish_reason"]
        for e in events
        if isinstance(e, dict)
        for ch in e["choices"]
        if ch["finish_reason"]
    ]
    assert finish == ["tool_calls"]
    usage = next(e["usage"] for e in events if isinstance(e, dict) and not e["choices"])
    # The call is generated token by token: one delta for the name, then one per argument token
    # (one engine step is one token here, and llama.cpp sends every token on its own).
    assert usage["completion_tokens"] == len(calls) > 2


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_messages_tool_loop(twin: FleetFactory, http: aiohttp.ClientSession, flavor: str) -> None:
    tools = [{"name": "get_weather", "description": "Weather", "input_schema": SCHEMA}]
    turns: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
    async with twin(engine_spec("e", flavor)) as fleet:
        url = fleet.url("e") + "/v1/messages"
        async with http.post(
            url, json={"model": MODEL, "max_tokens": 64, "tools": tools, "messages": turns}
        ) as r:
            first = await r.json()
        assert first["stop_reason"] == "tool_use"
        use = first["content"][-1]
        assert use["type"] == "tool_use" and use["name"] == "get_weather" and use["input"] == ARGUMENTS
        turns += [
            {"role": "assistant", "content": first["content"]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "18C"}],
            },
        ]
        async with http.post(
            url, json={"model": MODEL, "max_tokens": 8, "tools": tools, "messages": turns}
        ) as r:
            second = await r.json()
    assert second["stop_reason"] == "max_tokens" and second["content"][-1]["type"] == "text"


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_responses_function_call_loop(twin: FleetFactory, flavor: str) -> None:
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": SCHEMA}]
    async with twin(engine_spec("e", flavor)) as fleet:
        client = openai.AsyncOpenAI(base_url=fleet.url("e") + "/v1", api_key="unused", max_retries=0)
        first = await client.responses.create(model=MODEL, input="Weather in Paris?", tools=tools)
        call = first.output[-1]
        assert call.type == "function_call" and call.name == "get_weather"
        assert json.loads(call.arguments) == ARGUMENTS
        items: Any = [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "18C"},
        ]
        second = await client.responses.create(model=MODEL, input=items, tools=tools, max_output_tokens=8)
    assert [item.type for item in second.output] == ["message"] and second.output_text
