"""The agent APIs through a running gateway over twin fleets, driven by the official SDKs: anthropic
(messages.create whole and streamed, count_tokens) and openai (responses.create whole and streamed, a
follow-up by previous_response_id, embeddings.create); the measurements of Messages traffic in
/metrics and /gateway/stats."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import pytest
from anthropic.types import MessageParam, ToolParam
from e2e_harness import REPO, Stack, fleet_spec, gateway_over_fleet

from gateway.sim.fleet import FleetSpec

AGENTS = REPO / "policies" / "agents.yaml"
TOOLS: list[ToolParam] = [
    {
        "name": "read_file",
        "description": "Read a file of the repository",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]
ASK: list[MessageParam] = [{"role": "user", "content": "Summarise the README in two sentences."}]


def pair_with_llamacpp() -> FleetSpec:
    """spark-pair-27b with its SGLang box (Messages translated to chat) and its vLLM box swapped for a
    llama-server (Messages, count_tokens and embeddings natively)."""
    spec = fleet_spec("spark-pair-27b")
    engines = [
        e.model_copy(update={"flavor": "llamacpp", "embeddings": True}) if e.flavor == "vllm" else e
        for e in spec.engines
    ]
    return spec.model_copy(update={"engines": engines})


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with gateway_over_fleet(pair_with_llamacpp(), policy=AGENTS, state_dir=tmp_path) as s:
        yield s


def claude(stack: Stack) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=stack.url, api_key="unused", max_retries=0, timeout=30)


async def test_messages_create_whole_translated_and_native(stack: Stack) -> None:
    client = claude(stack)
    raw = await client.messages.with_raw_response.create(
        model=stack.model,
        max_tokens=32,
        messages=ASK,
        tools=TOOLS,
    )
    agent = await raw.parse()
    assert raw.headers["x-gateway-profile"] == "agent"
    assert raw.headers["x-gateway-backend"] == "sglang-fp8-ngram"  # translated to chat and back
    assert agent.type == "message" and agent.content and agent.usage.output_tokens > 0
    raw = await client.messages.with_raw_response.create(model=stack.model, max_tokens=16, messages=ASK)
    short = await raw.parse()
    assert raw.headers["x-gateway-profile"] == "agent-short"
    assert raw.headers["x-gateway-backend"] == "vllm-nvfp4-mtp"  # llama-server: Messages natively
    assert short.content[0].type == "text" and short.usage.input_tokens > 0


async def test_messages_stream_and_its_measurements(stack: Stack) -> None:
    client = claude(stack)
    for tools in (TOOLS, anthropic.omit):  # translated (agent) and native (agent-short)
        async with client.messages.stream(model=stack.model, max_tokens=48, messages=ASK, tools=tools) as s:
            text = "".join([chunk async for chunk in s.text_stream])
            final = await s.get_final_message()
        assert final.usage.output_tokens > 0 and (text or final.stop_reason == "tool_use")
    metrics = (await stack.http.get("/metrics")).text
    for profile, backend in (("agent", "sglang-fp8-ngram"), ("agent-short", "vllm-nvfp4-mtp")):
        for name in ("gateway_ttft_seconds_count", "gateway_itl_seconds_count"):
            counts = [
                float(line.rsplit(" ", 1)[1])
                for line in metrics.splitlines()
                if line.startswith(name) and f'profile="{profile}"' in line and f'backend="{backend}"' in line
            ]
            assert counts and sum(counts) >= 1, (name, profile)
    stats = (await stack.http.get("/gateway/stats")).text
    assert '"agent"' in stats and '"agent-short"' in stats and "ttft" in stats and "itl" in stats


async def test_count_tokens_reaches_an_engine_serving_it(stack: Stack) -> None:
    count = await claude(stack).messages.count_tokens(model=stack.model, messages=ASK)
    assert count.input_tokens > 5


# The first response is made on fp8 (its own profile); follow-ups match the default profile, which
# prefers nvfp4-mtp: only the pin sends them where their previous response is stored.
SPLIT = """version: 1
profiles:
  - name: first
    when: {max_output_tokens: {eq: 24}}
    prefer: [fp8]
  - name: default
    prefer: [nvfp4-mtp, fp8]
"""


async def test_responses_whole_streamed_and_a_follow_up_on_the_same_backend(tmp_path: Path) -> None:
    # spark-trio-unequal: two vLLM boxes serve Responses, so a follow-up could land on the wrong one.
    policy = tmp_path / "split.yaml"
    policy.write_text(SPLIT)
    async with gateway_over_fleet("spark-trio-unequal", policy=policy) as stack:
        raw = await stack.client.responses.with_raw_response.create(
            model=stack.model, input="Name three prime numbers.", max_output_tokens=24
        )
        first = raw.parse()
        holder = raw.headers["x-gateway-backend"]
        assert holder == "fp8"
        assert first.id and first.output_text and first.usage is not None
        stream = await stack.client.responses.create(
            model=stack.model, input="Count to five.", max_output_tokens=24, stream=True
        )
        events = [event async for event in stream]
        kinds = [event.type for event in events]
        assert "response.output_text.delta" in kinds and kinds[-1] == "response.completed"
        streamed_id = events[-1].response.id  # type: ignore[union-attr]
        on_streamed = await stack.client.responses.with_raw_response.create(
            model=stack.model, input="Go on.", previous_response_id=streamed_id, max_output_tokens=16
        )
        assert on_streamed.headers["x-gateway-backend"] == "fp8"  # the id was read from the stream
        backends = set()
        for _ in range(4):
            raw = await stack.client.responses.with_raw_response.create(
                model=stack.model, input="And two more?", previous_response_id=first.id, max_output_tokens=16
            )
            assert raw.parse().output_text
            backends.add(raw.headers["x-gateway-backend"])
        assert backends == {holder}
        stored = await stack.http.get(f"/v1/responses/{first.id}")
        assert stored.status_code == 200 and stored.json()["id"] == first.id


async def test_embeddings_create(stack: Stack) -> None:
    answer = await stack.client.embeddings.create(model=stack.model, input=["a sentence", "another one"])
    assert len(answer.data) == 2 and len(answer.data[0].embedding) > 8
