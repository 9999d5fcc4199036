"""The official openai client streams from every flavor."""

from __future__ import annotations

import pytest
from openai import AsyncOpenAI

from tests.sim.conftest import MODEL, FleetFactory, engine_spec


@pytest.mark.parametrize("flavor", ["vllm", "sglang", "llamacpp"])
async def test_openai_client_streams_chat_with_usage(twin: FleetFactory, flavor: str) -> None:
    async with twin(engine_spec(flavor=flavor, reasoning=True)) as fleet:
        client = AsyncOpenAI(base_url=fleet.url("e") + "/v1", api_key="unused", max_retries=0, timeout=10)
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Hello there"}],
            max_tokens=16,
            stream=True,
            stream_options={"include_usage": True},
        )
        pieces: list[str] = []
        finish = None
        usage = None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                pieces.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
        completion = await client.completions.create(model=MODEL, prompt="Once", max_tokens=4)
        await client.close()
    assert finish == "length"
    assert usage is not None and usage.completion_tokens == 16
    assert "".join(pieces)
    assert completion.usage is not None and completion.usage.completion_tokens == 4
