"""The official openai client through the gateway in front of the real llama-server pair: streamed and
plain chat and completions, the capabilities the prober read from /props, and the gateway's own 400s."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from engine_fleet import CONTEXT_SIZE, EnginePair
from engine_http import get, parse_metrics
from gateway_harness import PLAIN, PLAIN_POOL, POOL, SPEC, SPEC_POOL, RunningGateway, backend_states, get_json
from real_prompts import FREE_PROMPT, MAX_TOKENS, OVERFLOW_TEXT, image_content

pytestmark = pytest.mark.real

MESSAGES: Any = [{"role": "user", "content": FREE_PROMPT}]
# Each " 7" is two Gemma tokens ("▁" and "7") but two characters: the gateway's ~4 characters per token
# estimate counts 750 tokens for 1600 of them, the engine counts about 3200, more than its 2048 context.
UNDER_ESTIMATED_TEXT = " 7" * 1600


@pytest.fixture
def client(pair_gateway: RunningGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=pair_gateway.v1, api_key="unused", max_retries=0, timeout=60) as c:
        yield c


def _prompt_tokens_total(engine_pair: EnginePair) -> float:
    total = 0.0
    for server in (engine_pair.plain, engine_pair.speculative):
        total += parse_metrics(get(server.port, "/metrics").text)["llamacpp:prompt_tokens_total"]
    return total


def test_streamed_chat_matches_the_non_streamed_answer(client: openai.OpenAI) -> None:
    plain = client.chat.completions.create(
        model=PLAIN_POOL, messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=0, seed=1
    )
    chunks = list(
        client.chat.completions.create(
            model=PLAIN_POOL,
            messages=MESSAGES,
            max_tokens=MAX_TOKENS,
            temperature=0,
            seed=1,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert plain.choices[0].message.content and streamed == plain.choices[0].message.content
    assert chunks[-1].usage is not None and plain.usage is not None
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens <= MAX_TOKENS


def test_stream_without_usage_gets_no_usage_chunk(client: openai.OpenAI) -> None:
    """The gateway asks the engine for usage to meter the stream, and strips it for a client that did not."""
    chunks = list(client.chat.completions.create(model=POOL, messages=MESSAGES, max_tokens=8, stream=True))
    assert any(c.choices and c.choices[0].delta.content for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_completions_stream_and_not_through_the_pool(client: openai.OpenAI) -> None:
    answer = client.completions.create(model=POOL, prompt="Once upon a time", max_tokens=8, temperature=0)
    assert answer.object == "text_completion" and answer.choices[0].text
    assert answer.usage is not None and 0 < answer.usage.completion_tokens <= 8
    pieces = list(
        client.completions.create(
            model=POOL, prompt="Once upon a time", max_tokens=8, temperature=0, stream=True
        )
    )
    assert "".join(p.choices[0].text for p in pieces if p.choices) == answer.choices[0].text


def test_responses_name_the_backend_that_served_them(client: openai.OpenAI) -> None:
    for pool, backend in ((PLAIN_POOL, PLAIN), (SPEC_POOL, SPEC)):
        raw = client.chat.completions.with_raw_response.create(model=pool, messages=MESSAGES, max_tokens=2)
        assert raw.headers["x-gateway-backend"] == backend


def test_discovery_reads_the_real_context_and_modalities(
    pair_gateway: RunningGateway, engine_pair: EnginePair
) -> None:
    states = backend_states(pair_gateway.port)
    for name in (PLAIN, SPEC):
        assert states[name]["status"] == "ready"
        assert states[name]["context_length"] == CONTEXT_SIZE  # /props default_generation_settings.n_ctx
        assert states[name]["modalities"] == ["text"]  # /props modalities: vision, audio false
        assert states[name]["served_models"] == [str(engine_pair.model_path)]
    cards = {card["id"]: card for card in get_json(pair_gateway.port, "/v1/models")["data"]}
    assert set(cards) == {POOL, PLAIN_POOL, SPEC_POOL}
    assert all(card["max_model_len"] == CONTEXT_SIZE for card in cards.values())


def test_context_overflow_is_refused_by_the_gateway_estimate(
    client: openai.OpenAI, engine_pair: EnginePair
) -> None:
    before = _prompt_tokens_total(engine_pair)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=POOL, messages=[{"role": "user", "content": OVERFLOW_TEXT}], max_tokens=4
        )
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "context_length_exceeded"
    assert f"the largest context in pool {POOL} is {CONTEXT_SIZE}" in error["message"]
    assert _prompt_tokens_total(engine_pair) == before, "no engine saw the request"


def test_under_estimated_overflow_passes_the_engine_400_through(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=PLAIN_POOL, messages=[{"role": "user", "content": UNDER_ESTIMATED_TEXT}], max_tokens=4
        )
    error = caught.value.body
    # The gateway's one error shape, llama-server's own error name as the code and its counts kept.
    assert isinstance(error, dict) and error["type"] == "invalid_request_error"
    assert error["code"] == "exceed_context_size_error"
    assert error["n_ctx"] == CONTEXT_SIZE and error["n_prompt_tokens"] > CONTEXT_SIZE
    assert caught.value.response.headers["x-gateway-backend"] == PLAIN


def test_image_to_the_text_only_pool_is_the_gateways_400(
    client: openai.OpenAI, engine_pair: EnginePair
) -> None:
    before = _prompt_tokens_total(engine_pair)
    with pytest.raises(openai.BadRequestError) as caught:
        messages: Any = [{"role": "user", "content": image_content("What is this?")}]
        client.chat.completions.create(model=POOL, messages=messages, max_tokens=4)
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "unsupported_modality"
    assert error["message"] == f"no backend of pool {POOL} accepts image input"
    assert _prompt_tokens_total(engine_pair) == before, "the engine (which would answer 500) never saw it"
