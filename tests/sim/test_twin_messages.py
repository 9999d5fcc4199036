"""The twin's Anthropic Messages endpoint per flavor: the SDK's client works against it, event order
and block framing follow each engine, and the text and timing are chat's."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import anthropic
import pytest

from tests.sim.conftest import MODEL, SPEC, FleetFactory, chat, engine_spec

FLAVORS = ("vllm", "sglang", "llamacpp")
QUESTION = "Explain speculative decoding in one paragraph."


def messages(**extra: Any) -> dict[str, Any]:
    body = {"model": MODEL, "max_tokens": 16, "temperature": 0, "system": "Be brief."}
    return {**body, "messages": [{"role": "user", "content": QUESTION}], **extra}


def sdk_args() -> dict[str, Any]:
    """messages() as the SDK's keyword arguments (it takes sampling fields through extra_body)."""
    body = messages()
    temperature = body.pop("temperature")
    return {**body, "extra_body": {"temperature": temperature}}


def parse_events(raw: str) -> list[tuple[str, Any]]:
    """`event:`/`data:` blocks as (name, data); a bare `data: [DONE]` block as ("", "[DONE]")."""
    events: list[tuple[str, Any]] = []
    for block in raw.strip("\n").split("\n\n"):
        lines = block.split("\n")
        if lines == ["data: [DONE]"]:
            events.append(("", "[DONE]"))
            continue
        assert lines[0].startswith("event: ") and lines[1].startswith("data: ") and len(lines) == 2, block
        data = json.loads(lines[1][len("data: ") :])
        assert data["type"] == lines[0][len("event: ") :]
        events.append((data["type"], data))
    return events


async def post_events(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> list[tuple[str, Any]]:
    async with http.post(url + "/v1/messages", json={**body, "stream": True}) as resp:
        assert resp.status == 200 and resp.content_type == "text/event-stream"
        return parse_events(await resp.text())


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_sdk_client_gets_a_whole_message_with_chat_usage(
    twin: FleetFactory, http: aiohttp.ClientSession, flavor: str
) -> None:
    async with twin(engine_spec("e", flavor, reasoning=True)) as fleet:
        client = anthropic.AsyncAnthropic(base_url=fleet.url("e"), api_key="unused", max_retries=0)
        message = await client.messages.create(**sdk_args())
        same = chat(QUESTION, max_tokens=1)
        same["messages"].insert(0, {"role": "system", "content": "Be brief."})
        async with http.post(fleet.url("e") + "/v1/chat/completions", json=same) as r:
            chat_prompt_tokens = (await r.json())["usage"]["prompt_tokens"]
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 16
    # The same conversation as chat: the same prompt.
    assert message.usage.input_tokens == chat_prompt_tokens
    assert message.model == MODEL


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_sdk_stream_accumulates_to_the_same_message_as_the_whole_answer(
    twin: FleetFactory, flavor: str
) -> None:
    async with twin(engine_spec("e", flavor, reasoning=True)) as fleet:
        client = anthropic.AsyncAnthropic(base_url=fleet.url("e"), api_key="unused", max_retries=0)
        whole = await client.messages.create(**sdk_args())
        async with client.messages.stream(**sdk_args()) as stream:
            streamed = await stream.get_final_message()
    assert [b.model_dump(exclude={"signature"}) for b in streamed.content] == [
        b.model_dump(exclude={"signature"}) for b in whole.content
    ]
    assert streamed.stop_reason == whole.stop_reason and streamed.usage.output_tokens == 16


async def test_vllm_frames_open_on_the_role_chunk_close_blocks_in_turn_and_end_with_done(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec("e", "vllm", reasoning=True)) as fleet:
        events = await post_events(http, fleet.url("e"), messages())
    names = [n for n, _ in events]
    assert names[0] == "message_start" and "ping" not in names
    first_stop = names.index("content_block_stop")
    assert names[first_stop + 1] == "content_block_start"  # thinking closes before text opens
    assert names[-3:] == ["message_delta", "message_stop", ""]
    input_tokens = events[0][1]["message"]["usage"]["input_tokens"]
    assert events[-3][1]["usage"] == {"input_tokens": input_tokens, "output_tokens": 16}


async def test_llamacpp_closes_every_block_at_the_end_with_a_signature(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec("e", "llamacpp", reasoning=True)) as fleet:
        events = await post_events(http, fleet.url("e"), messages())
    names = [n for n, _ in events]
    ending = [
        "content_block_delta",
        "content_block_stop",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert names[-5:] == ending and "" not in names  # no [DONE]
    signature = {"type": "signature_delta", "signature": ""}
    assert events[-5][1] == {"type": "content_block_delta", "index": 0, "delta": signature}
    assert [events[-4][1]["index"], events[-3][1]["index"]] == [0, 1]
    assert events[-2][1]["usage"] == {"output_tokens": 16}
    # One delta per token (llama-server streams token by token).
    assert len([n for n in names if n == "content_block_delta"]) == 16 + 1


async def test_text_is_chats_text_and_speculative_steps_carry_several_tokens(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec("e", "vllm", perf={"speculative": SPEC})) as fleet:
        events = await post_events(http, fleet.url("e"), messages(max_tokens=60, system=None))
        async with http.post(
            fleet.url("e") + "/v1/chat/completions", json=chat(QUESTION, max_tokens=60, temperature=0)
        ) as r:
            chat_text = (await r.json())["choices"][0]["message"]["content"]
    deltas = [d["delta"]["text"] for n, d in events if n == "content_block_delta"]
    assert "".join(deltas) == chat_text
    assert len(deltas) < 60  # a drafting step emits its accepted tokens in one event


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_count_tokens_matches_the_generation_input_tokens(
    twin: FleetFactory, http: aiohttp.ClientSession, flavor: str
) -> None:
    async with twin(engine_spec("e", flavor)) as fleet:
        body = messages()
        async with http.post(fleet.url("e") + "/v1/messages/count_tokens", json=body) as resp:
            counted = await resp.json()
        async with http.post(fleet.url("e") + "/v1/messages", json=body) as resp:
            generated = await resp.json()
    assert counted["input_tokens"] == generated["usage"]["input_tokens"] > 0
    if flavor == "vllm":
        assert counted["context_management"] == {"original_input_tokens": counted["input_tokens"]}


async def test_errors_come_in_the_engines_shape_before_the_stream(
    twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec("v", "vllm"), engine_spec("l", "llamacpp", context_length=64)) as fleet:
        async with http.post(fleet.url("v") + "/v1/messages", json=messages(model="other")) as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["message"] == "The model `other` does not exist."
        async with http.post(fleet.url("v") + "/v1/messages", json=messages(messages=[])) as resp:
            assert resp.status == 400
        long = messages(messages=[{"role": "user", "content": "word " * 100}], stream=True)
        async with http.post(fleet.url("l") + "/v1/messages", json=long) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["type"] == "exceed_context_size_error"
