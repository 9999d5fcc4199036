"""The official anthropic client through the gateway in front of the real llama-server pair: /v1/messages
passes through natively (llama-server serves it), streamed and not, with usage and stop_reason, and the
gateway measures the stream (TTFT and inter-token gaps in /metrics for the backend that served it).

The translation to chat is checked against the same engine: messages_to_chat of a Messages request is a
chat request llama-server accepts, and its chat stream, translated, has the structure of its own
Messages stream for the same greedy request."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from gateway_harness import PLAIN, PLAIN_POOL, RunningGateway, histogram_delta, metric_samples
from llama_process import LlamaServer
from real_prompts import FREE_PROMPT, MAX_TOKENS

from gateway.translate import ChatToMessagesStream, messages_to_chat
from tests.translate.capture_real_llamacpp import MESSAGES_REQUEST, post_stream
from tests.translate.sse_fixtures import anthropic_events
from tests.translate.test_real_llamacpp_stream import shape

pytestmark = pytest.mark.real

MESSAGES: Any = [{"role": "user", "content": FREE_PROMPT}]
LABELS = f'backend="{PLAIN}",profile="default"'
# This SDK release has no `temperature` argument; it goes in the body as the API defines it.
GREEDY = {"temperature": 0}

# Everything the translation carries at once: a system block list, a tool call and its result, tool
# definitions and choice, stop sequences.
TOOL_TURN: dict[str, Any] = {
    "model": "gemma",
    "max_tokens": 8,
    "temperature": 0,
    "system": [{"type": "text", "text": "Be brief."}],
    "stop_sequences": ["\n\n"],
    "tools": [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "input_schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        }
    ],
    "tool_choice": {"type": "auto"},
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"}]},
    ],
}


@pytest.fixture
def client(pair_gateway: RunningGateway) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=pair_gateway.url, api_key="unused", max_retries=0, timeout=60) as c:
        yield c


def _post(server: LlamaServer, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_messages_stream_and_not_pass_through_with_usage_and_stop_reason(client: anthropic.Anthropic) -> None:
    raw = client.messages.with_raw_response.create(
        model=PLAIN_POOL, max_tokens=MAX_TOKENS, messages=MESSAGES, extra_body=GREEDY
    )
    assert raw.headers["x-gateway-backend"] == PLAIN
    whole = raw.parse()
    # llama-server's own id: a translated answer would carry the gateway's `msg_` id.
    assert whole.id.startswith("chatcmpl-"), whole.id
    assert whole.stop_reason in ("end_turn", "max_tokens") and whole.role == "assistant"
    assert 0 < whole.usage.output_tokens <= MAX_TOKENS and whole.usage.input_tokens > 0
    whole_text = "".join(block.text for block in whole.content if block.type == "text")

    with client.messages.stream(
        model=PLAIN_POOL, max_tokens=MAX_TOKENS, messages=MESSAGES, extra_body=GREEDY
    ) as stream:
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed_text and streamed_text == whole_text  # greedy: the same answer both ways
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_the_gateway_measures_a_messages_stream(
    client: anthropic.Anthropic, pair_gateway: RunningGateway
) -> None:
    before = metric_samples(pair_gateway.port)
    with client.messages.stream(
        model=PLAIN_POOL, max_tokens=MAX_TOKENS, messages=MESSAGES, extra_body=GREEDY
    ) as stream:
        deltas = sum(1 for event in stream if event.type == "content_block_delta")
        final = stream.get_final_message()
    after = metric_samples(pair_gateway.port)
    ttft_sum, ttft_n = histogram_delta(before, after, "gateway_ttft_seconds", LABELS)
    itl_sum, itl_n = histogram_delta(before, after, "gateway_itl_seconds", LABELS)
    assert ttft_n == 1 and ttft_sum > 0
    assert deltas >= 2 and itl_n >= 1 and itl_sum > 0  # gaps between content events, as for chat
    key = f"gateway_output_tokens_total{{{LABELS}}}"
    assert after.get(key, 0.0) - before.get(key, 0.0) == final.usage.output_tokens


def test_a_translated_messages_request_is_a_chat_request_llama_server_accepts(
    plain_engine: LlamaServer,
) -> None:
    status, answer = _post(plain_engine, "/v1/chat/completions", messages_to_chat(TOOL_TURN))
    assert status == 200, answer
    assert answer["object"] == "chat.completion" and answer["usage"]["completion_tokens"] > 0


def test_translated_live_chat_stream_has_the_engines_messages_structure(plain_engine: LlamaServer) -> None:
    """The recorded fixtures' check (tests/translate/test_real_llamacpp_stream.py) on a fresh capture."""
    theirs = anthropic_events(
        post_stream(plain_engine.base_url, "/v1/messages", {**MESSAGES_REQUEST, "stream": True})
    )
    chat_raw = post_stream(
        plain_engine.base_url, "/v1/chat/completions", messages_to_chat({**MESSAGES_REQUEST, "stream": True})
    )
    stream = ChatToMessagesStream("gemma")
    payloads = [block[len(b"data: ") :] for block in chat_raw.split(b"\n\n") if block.startswith(b"data: ")]
    ours = anthropic_events(b"".join(b"".join(stream.feed(payload)) for payload in payloads))
    assert stream.done
    assert shape(ours) == shape(theirs)
    assert ours[-2][1]["delta"] == theirs[-2][1]["delta"]
    assert ours[-2][1]["usage"]["output_tokens"] == theirs[-2][1]["usage"]["output_tokens"]
