"""The gateway in front of the real vLLM pair: the official openai and anthropic clients through it, and the
scraper's reading of the real speculative counters against the engine's own /metrics."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from engine_http import get, parse_metrics
from gateway_harness import (
    PLAIN_POOL,
    POOL,
    SPEC,
    SPEC_POOL,
    RunningGateway,
    get_json,
)
from real_prompts import REPETITIVE_PROMPTS
from vllm_process import SERVED_NAME, VllmPair

pytestmark = pytest.mark.real

MAX_TOKENS = 24
MESSAGES: Any = [{"role": "user", "content": "Name one colour of the sky."}]
STATS_TIMEOUT_S = 15.0
SPEC_COUNTERS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total")  # fmt: skip


@pytest.fixture
def client(vllm_gateway: RunningGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=vllm_gateway.v1, api_key="unused", max_retries=0, timeout=120) as c:
        yield c


@pytest.mark.parametrize("pool", [PLAIN_POOL, SPEC_POOL])
def test_openai_chat_stream_and_whole_agree(client: openai.OpenAI, pool: str) -> None:
    whole = client.chat.completions.create(
        model=pool, messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=0
    )
    chunks = list(client.chat.completions.create(
        model=pool, messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ))  # fmt: skip
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert whole.choices[0].message.content and streamed == whole.choices[0].message.content
    assert whole.model in (pool, SERVED_NAME) and whole.choices[0].finish_reason in ("stop", "length")
    usage = chunks[-1].usage
    assert usage is not None and whole.usage is not None and chunks[-1].choices == []
    assert usage.completion_tokens == whole.usage.completion_tokens <= MAX_TOKENS
    assert usage.prompt_tokens == whole.usage.prompt_tokens > 5


def test_openai_completions(client: openai.OpenAI) -> None:
    done = client.completions.create(model=POOL, prompt="one two three four", max_tokens=8, temperature=0)
    assert done.choices[0].text and done.choices[0].finish_reason == "length"
    assert done.usage is not None and done.usage.completion_tokens == 8


def test_anthropic_messages_stream(vllm_gateway: RunningGateway) -> None:
    claude = anthropic.Anthropic(base_url=vllm_gateway.url, api_key="unused", max_retries=0, timeout=120)
    with claude.messages.stream(model=POOL, max_tokens=16, messages=MESSAGES) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_delta" in kinds and "message_delta" in kinds
    assert final.usage.output_tokens > 0 and final.stop_reason in ("end_turn", "max_tokens")


def _engine_counters(vllm_pair: VllmPair) -> dict[str, float]:
    samples = parse_metrics(get(vllm_pair.speculative.port, "/metrics").text)
    return {name: sum(v for k, v in samples.items() if k.split("{")[0] == name) for name in SPEC_COUNTERS}


def test_gateway_stats_show_the_engines_own_acceptance(
    client: openai.OpenAI, vllm_gateway: RunningGateway, vllm_pair: VllmPair
) -> None:
    for prompt in REPETITIVE_PROMPTS:
        client.chat.completions.create(model=SPEC_POOL, messages=[{"role": "user", "content": prompt}],
                                       max_tokens=48, temperature=0)  # fmt: skip
    engine = _engine_counters(vllm_pair)
    drafts, drafted, accepted = (engine[name] for name in SPEC_COUNTERS)
    assert drafted > 0 and accepted > 0, engine
    # The scraper runs every half second: wait until it has read the counters the engine shows now.
    deadline, view = time.monotonic() + STATS_TIMEOUT_S, None
    while time.monotonic() < deadline:
        view = get_json(vllm_gateway.port, "/gateway/stats")["engines"][SPEC].get("acceptance_total")
        if view is not None and view["draft_tokens"] == drafted:
            break
        time.sleep(0.1)
    assert view is not None and view["draft_tokens"] == drafted, (view, engine)
    rate, length = accepted / drafted, 1 + accepted / drafts
    print(f"\nengine: rate {rate:.4f} length {length:.3f}; gateway: rate {view['acceptance_rate']:.4f}"
          f" length {view['mean_acceptance_length']:.3f}; per position {view['per_position']}")  # fmt: skip
    assert abs(view["acceptance_rate"] - rate) <= 0.02 * rate
    assert abs(view["mean_acceptance_length"] - length) <= 0.02 * length
    assert len(view["per_position"]) == 3 and 0 < view["per_position"][0] <= 1
