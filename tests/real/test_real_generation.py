"""Generation on a real llama-server: chat and completions bodies, SSE framing, usage and timings."""

from __future__ import annotations

import json

import pytest
from engine_fleet import EnginePair
from engine_http import post, sse_data, sse_events
from llama_process import LlamaServer
from real_prompts import FREE_PROMPT, chat

pytestmark = pytest.mark.real

TIMINGS_FIELDS = {
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
}


def test_chat_reply_carries_usage_and_timings_without_draft_fields(engine_pair: EnginePair) -> None:
    response = post(engine_pair.plain.port, "/v1/chat/completions", chat(FREE_PROMPT, max_tokens=8))
    assert response.status == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    # The server's own model name, not an echo of the request's "model".
    assert body["model"] == str(engine_pair.model_path)
    assert body["system_fingerprint"].startswith("b")
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] in {"stop", "length"}
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert set(body["timings"]) == TIMINGS_FIELDS
    assert body["timings"]["predicted_n"] == usage["completion_tokens"]


def test_completions_return_text_completion_objects(plain_engine: LlamaServer) -> None:
    payload = {"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}
    body = post(plain_engine.port, "/v1/completions", payload).json()
    assert body["object"] == "text_completion"
    # Completions ids carry the chat prefix in this build (OpenAI uses "cmpl-").
    assert body["id"].startswith("chatcmpl-")
    (choice,) = body["choices"]
    assert isinstance(choice["text"], str) and choice["text"]
    assert choice["finish_reason"] in {"stop", "length"}
    assert body["usage"]["completion_tokens"] <= 6
    assert set(body["timings"]) == TIMINGS_FIELDS


def test_stream_is_data_frames_ending_in_done_with_usage_chunk(plain_engine: LlamaServer) -> None:
    payload = chat(FREE_PROMPT, max_tokens=8, stream=True, stream_options={"include_usage": True})
    response = post(plain_engine.port, "/v1/chat/completions", payload)
    assert response.status == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    # Every event is exactly one "data: " line; no event:, id: or comment lines, LF separators only.
    assert all(event.startswith("data: ") and "\n" not in event for event in sse_events(response.body))
    assert b"\r\n" not in response.body
    payloads = sse_data(response.body)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    # The role chunk carries "content": null, not "".
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    finish, usage_chunk = chunks[-2], chunks[-1]
    assert finish["choices"][0]["delta"] == {}
    assert finish["choices"][0]["finish_reason"] in {"stop", "length"}
    assert usage_chunk["choices"] == []
    assert {"prompt_tokens", "completion_tokens", "total_tokens"} <= usage_chunk["usage"].keys()
    assert set(usage_chunk["timings"]) == TIMINGS_FIELDS
    assert all("usage" not in c for c in chunks[:-1])


def test_stream_without_include_usage_puts_timings_on_the_finish_chunk(plain_engine: LlamaServer) -> None:
    response = post(plain_engine.port, "/v1/chat/completions", chat(FREE_PROMPT, max_tokens=4, stream=True))
    chunks = [json.loads(p) for p in sse_data(response.body)[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] in {"stop", "length"}
    assert all("usage" not in c for c in chunks)
    assert set(chunks[-1]["timings"]) == TIMINGS_FIELDS
