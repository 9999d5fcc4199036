"""Every flavor names its bodies as OpenAI clients expect: a reply, a stream chunk, the usage chunk."""

from __future__ import annotations

import aiohttp
import pytest

from tests.sim.conftest import FleetFactory, chat, engine_spec, stream


@pytest.mark.parametrize("flavor", ["vllm", "sglang", "llamacpp"])
async def test_reply_chunk_and_usage_chunk_carry_the_object_of_their_endpoint(
    flavor: str, twin: FleetFactory, http: aiohttp.ClientSession
) -> None:
    async with twin(engine_spec(flavor=flavor)) as fleet:
        url = fleet.url("e")
        async with http.post(url + "/v1/chat/completions", json=chat(max_tokens=3)) as resp:
            chat_reply = await resp.json()
        async with http.post(url + "/v1/completions", json={"prompt": "Once", "max_tokens": 3}) as resp:
            text_reply = await resp.json()
        body = chat(max_tokens=3, stream=True, stream_options={"include_usage": True})
        events = [e for e in await stream(http, url + "/v1/chat/completions", body) if isinstance(e, dict)]
    assert chat_reply["object"] == "chat.completion"
    assert text_reply["object"] == "text_completion"
    assert {e["object"] for e in events} == {"chat.completion.chunk"}
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 3
