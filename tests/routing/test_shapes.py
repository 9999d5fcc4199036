"""Prompt-token estimates of the agent APIs' shapes (routing/request/shapes.py via
routing/request/features.py): every field the engine renders into the prompt counts, media count as media,
chat is counted as before."""

from __future__ import annotations

from typing import Any

from gateway.records import BackendSnapshot
from gateway.routing.request.features import MEDIA_TOKENS, TokenEstimator, content_size, extract_features

POOL = [BackendSnapshot("a")]
TEXT = "x" * 400  # 100 tokens at the default 4 characters per token


def prompt_tokens(endpoint: str, body: dict[str, Any]) -> int:
    return extract_features(endpoint, {"model": "m", **body}, POOL, TokenEstimator()).prompt_tokens


def test_messages_count_system_tool_use_and_tool_results() -> None:
    bare = prompt_tokens("messages", {"messages": [{"role": "user", "content": "hi"}]})
    with_system = prompt_tokens("messages", {"system": TEXT, "messages": [{"role": "user", "content": "hi"}]})
    assert with_system - bare == 100
    as_blocks = prompt_tokens(
        "messages",
        {"system": [{"type": "text", "text": TEXT}], "messages": [{"role": "user", "content": "hi"}]},
    )
    assert as_blocks == with_system
    turns = [
        {"role": "user", "content": "hi"},
        {"role": "assistant",
         "content": [{"type": "tool_use", "id": "t", "name": "read", "input": {"path": TEXT}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                      "content": [{"type": "text", "text": TEXT}]}]},
    ]  # fmt: skip
    agent = prompt_tokens("messages", {"messages": turns})
    assert agent - bare >= 200  # the tool input and the tool result both weigh


def test_messages_images_and_tools_count() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 100_000}}
    body = {"messages": [{"role": "user", "content": [image, {"type": "text", "text": "what?"}]}]}
    features = extract_features("messages", {"model": "m", **body}, POOL, TokenEstimator())
    assert "image" in features.modalities
    assert (
        MEDIA_TOKENS["image"] <= features.prompt_tokens < MEDIA_TOKENS["image"] + 20
    )  # never the base64 bytes
    tools = [{"name": "read", "description": TEXT, "input_schema": {"type": "object"}}]
    with_tools = extract_features("messages", {"model": "m", **body, "tools": tools}, POOL, TokenEstimator())
    assert with_tools.tools and with_tools.prompt_tokens - features.prompt_tokens >= 100


def test_responses_count_instructions_and_input_items() -> None:
    assert prompt_tokens("responses", {"input": TEXT}) == 100
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": TEXT}]},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": TEXT},
        {"type": "function_call_output", "call_id": "c", "output": TEXT},
    ]
    assert prompt_tokens("responses", {"instructions": TEXT, "input": items}) >= 400
    features = extract_features("responses", {"model": "m", "input": "hi", "max_output_tokens": 77}, POOL,
                                TokenEstimator())  # fmt: skip
    assert features.max_output_tokens == 77 and features.endpoint == "responses"


def test_embeddings_count_strings_and_token_ids() -> None:
    assert prompt_tokens("embeddings", {"input": [TEXT, TEXT]}) == 200
    assert prompt_tokens("embeddings", {"input": [[1, 2, 3], [4, 5]]}) == 5
    assert prompt_tokens("rerank", {"query": TEXT, "documents": [TEXT, {"text": TEXT}]}) == 300


def test_a_chat_body_is_counted_as_before() -> None:
    body = {
        "messages": [
            {"role": "system", "content": TEXT},
            {"role": "user", "content": [{"type": "text", "text": TEXT}]},
        ]
    }
    assert content_size(body) == (800, 0, {"image": 0, "video": 0, "audio": 0})
    assert prompt_tokens("chat", body) == 200 + 2 * 4  # per-message overhead as before
