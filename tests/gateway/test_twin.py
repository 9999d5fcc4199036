"""End to end against the engine twin: the official openai client (sync and async, stream and not),
reasoning and tool fields, failover, 4xx pass-through and upstream cancellation observed by the engine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from gateway_fakes import running_gateway
from openai.types.chat import ChatCompletionMessageParam

from gateway.app import Gateway
from gateway.backends.registry import Status
from gateway.commands.serve import settings_for_fleet
from gateway.records import RequestRecord
from gateway.sim.fleet import FleetSpec
from gateway.sim.runner import TwinFleet

MODEL = "twin/qwen"
FAST_PERF = {"max_num_seqs": 32}


def _engine(name: str, flavor: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "flavor": flavor,
        "served_model_name": MODEL,
        "context_length": 4096,
        "warmup_s": 0,
        "reasoning": True,
        **extra,
    }


SPEC = FleetSpec.model_validate(
    {
        "name": "test-duo",
        "engines": [_engine("one", "vllm"), _engine("two", "sglang"), _engine("three", "llamacpp")],
    }
)


class Twin:
    def __init__(self, fleet: TwinFleet, url: str, gateway: Gateway, records: list[RequestRecord]) -> None:
        self.fleet, self.url, self.gateway, self.records = fleet, url, gateway, records

    def only(self, name: str) -> None:
        """Make `name` the only ready backend, so the test knows where requests go."""
        for backend in self.gateway.registry.backends:
            if backend != name:
                self.gateway.registry.set_status(backend, Status.DEAD)


@pytest.fixture
async def twin() -> AsyncIterator[Twin]:
    records: list[RequestRecord] = []
    async with TwinFleet(SPEC, time_scale=50.0, ephemeral_ports=True) as fleet:
        await fleet.wait_ready()
        urls = {name: fleet.url(name) for name in fleet.names}
        settings = settings_for_fleet(SPEC, urls)
        # Probed once at start, then left alone: tests set backend states by hand.
        settings = settings.model_copy(update={"probe": settings.probe.model_copy(update={"interval_s": 60})})
        async with running_gateway(settings, observers=[records.append]) as (url, gateway):
            yield Twin(fleet, url, gateway, records)


def _messages(text: str = "Say something about sparks.") -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": text}]


async def test_async_client_streams_through_the_gateway(twin: Twin) -> None:
    client = openai.AsyncOpenAI(base_url=twin.url + "/v1", api_key="unused")
    stream = await client.chat.completions.create(
        model=MODEL, messages=_messages(), max_tokens=12, stream=True
    )
    pieces = [chunk async for chunk in stream]
    await client.close()
    assert any(c.choices and c.choices[0].delta.content for c in pieces)
    assert all(c.usage is None for c in pieces)  # the gateway's own usage chunk never reaches the client
    assert twin.records[-1].output_tokens == 12 and twin.records[-1].ttft is not None


async def test_async_client_non_stream_through_the_gateway(twin: Twin) -> None:
    client = openai.AsyncOpenAI(base_url=twin.url + "/v1", api_key="unused")
    answer = await client.chat.completions.create(model=MODEL, messages=_messages(), max_tokens=8)
    await client.close()
    assert answer.usage is not None and answer.usage.completion_tokens == 8
    assert answer.model == MODEL


def _sync_round_trip(url: str) -> tuple[str, int, str]:
    with openai.OpenAI(base_url=url + "/v1", api_key="unused") as client:
        text = "".join(
            chunk.choices[0].delta.content or ""
            for chunk in client.chat.completions.create(
                model=MODEL,
                messages=_messages(),
                max_tokens=10,
                stream=True,
                stream_options={"include_usage": True},
            )
            if chunk.choices
        )
        answer = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=5)
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=_messages(), max_tokens=3
        )
    assert answer.usage is not None
    return text, answer.usage.completion_tokens, raw.headers["x-gateway-backend"]


async def test_sync_client_stream_and_completions_through_the_gateway(twin: Twin) -> None:
    text, completion_tokens, backend = await asyncio.to_thread(_sync_round_trip, twin.url)
    assert text and completion_tokens == 5 and backend in twin.fleet.names


@pytest.mark.parametrize(("backend", "field"), [("one", "reasoning"), ("two", "reasoning_content")])
async def test_reasoning_fields_pass_through_as_each_engine_sends_them(
    twin: Twin, backend: str, field: str
) -> None:
    twin.only(backend)
    client = openai.AsyncOpenAI(base_url=twin.url + "/v1", api_key="unused")
    answer = await client.chat.completions.create(model=MODEL, messages=_messages(), max_tokens=40)
    await client.close()
    message = answer.choices[0].message.model_dump()
    assert message.get(field)


async def test_tools_request_is_answered_through_the_gateway(twin: Twin) -> None:
    tools: list[Any] = [
        {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
    ]
    client = openai.AsyncOpenAI(base_url=twin.url + "/v1", api_key="unused")
    answer = await client.chat.completions.create(
        model=MODEL, messages=_messages(), max_tokens=4, tools=tools, tool_choice="auto"
    )
    await client.close()
    assert answer.choices[0].finish_reason in {"stop", "length", "tool_calls"}


async def test_crashed_engine_fails_over_before_the_first_byte(twin: Twin) -> None:
    await twin.fleet.engine("one").crash()  # the prober (60 s interval) still believes it ready
    client = openai.AsyncOpenAI(base_url=twin.url + "/v1", api_key="unused", max_retries=0)
    raw = await client.chat.completions.with_raw_response.create(
        model=MODEL, messages=_messages(), max_tokens=3
    )
    await client.close()
    assert raw.headers["x-gateway-backend"] != "one"
    assert twin.records[-1].failures[0][0] == "one"


async def test_engine_500_fails_over_to_another_engine(twin: Twin) -> None:
    twin.fleet.engine("one").set_error_rate(1.0)
    twin.only("one")
    twin.gateway.registry.set_status("two", Status.READY)
    client = openai.AsyncOpenAI(base_url=twin.url + "/v1", api_key="unused", max_retries=0)
    raw = await client.chat.completions.with_raw_response.create(
        model=MODEL, messages=_messages(), max_tokens=3
    )
    await client.close()
    assert raw.headers["x-gateway-backend"] == "two"


async def test_context_too_long_400_reaches_the_client_as_the_engine_sent_it(twin: Twin) -> None:
    twin.only("one")
    client = openai.AsyncOpenAI(base_url=twin.url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model=MODEL, messages=_messages("word " * 6000), max_tokens=3)
    await client.close()
    assert "maximum context length" in str(caught.value)
    assert len(twin.records[-1].failures) == 0  # a 4xx is never retried elsewhere


async def _cancelled(twin: Twin, name: str) -> int:
    return twin.fleet.engine(name).stats.requests_cancelled_total


async def test_client_leaving_a_stream_cancels_the_engine_request(twin: Twin) -> None:
    twin.only("one")
    client = openai.AsyncOpenAI(base_url=twin.url + "/v1", api_key="unused")
    stream = await client.chat.completions.create(
        model=MODEL, messages=_messages(), max_tokens=2000, stream=True
    )
    async for _ in stream:
        break
    await stream.close()
    await client.close()
    async with asyncio.timeout(5):
        while await _cancelled(twin, "one") == 0:
            await asyncio.sleep(0.02)


async def test_client_leaving_a_non_stream_request_cancels_the_engine_request(twin: Twin) -> None:
    twin.only("one")
    client = openai.AsyncOpenAI(base_url=twin.url + "/v1", api_key="unused", max_retries=0, timeout=0.3)
    with pytest.raises(openai.APITimeoutError):
        await client.chat.completions.create(model=MODEL, messages=_messages(), max_tokens=2000)
    await client.close()
    async with asyncio.timeout(5):
        while await _cancelled(twin, "one") == 0:
            await asyncio.sleep(0.02)
    assert twin.gateway.registry.backends["one"].inflight == 0
