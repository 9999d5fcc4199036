"""Features from the parsed body: token estimate, output budget, modalities, sampling, live concurrency."""

from __future__ import annotations

import base64

from gateway.records import BackendSnapshot
from gateway.routing.request.features import (
    DEFAULT_CHARS_PER_TOKEN,
    MEDIA_TOKENS,
    PER_MESSAGE_TOKENS,
    TokenEstimator,
    extract_features,
    needed_tokens,
)

POOL = [BackendSnapshot("a", inflight=2), BackendSnapshot("b", inflight=3)]


def chat(text: str, **extra: object) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **extra}


def test_text_is_estimated_at_four_chars_per_token_before_any_sample() -> None:
    f = extract_features("chat", chat("x" * 4000), POOL, TokenEstimator())
    assert DEFAULT_CHARS_PER_TOKEN == 4.0
    assert f.prompt_tokens == 1000 + PER_MESSAGE_TOKENS


def test_images_add_a_fixed_estimate_and_their_bytes_are_not_counted() -> None:
    image = "data:image/png;base64," + base64.b64encode(b"\0" * 300_000).decode()
    content = [{"type": "text", "text": "x" * 400}, {"type": "image_url", "image_url": {"url": image}}]
    f = extract_features("chat", chat(content), POOL, TokenEstimator())  # type: ignore[arg-type]
    assert f.prompt_tokens == 100 + MEDIA_TOKENS["image"] + PER_MESSAGE_TOKENS
    assert f.modalities == {"text", "image"}


def test_every_media_part_spelling_is_recognised() -> None:
    content = [
        {"type": "input_image", "image_url": "x"},
        {"image_url": {"url": "x"}},  # a part without a type, as vLLM accepts
        {"type": "video_url", "video_url": {"url": "x"}},
        {"type": "input_audio", "input_audio": {"data": "x", "format": "wav"}},
        {"type": "audio_url", "audio_url": {"url": "x"}},
    ]
    f = extract_features("chat", chat(content), POOL, TokenEstimator())  # type: ignore[arg-type]
    assert f.modalities == {"text", "image", "video", "audio"}
    expected = 2 * MEDIA_TOKENS["image"] + MEDIA_TOKENS["video"] + 2 * MEDIA_TOKENS["audio"]
    assert f.prompt_tokens == expected + PER_MESSAGE_TOKENS


def test_completions_prompts_as_text_or_token_ids() -> None:
    est = TokenEstimator()
    assert extract_features("/v1/completions", {"prompt": "y" * 800}, POOL, est).prompt_tokens == 200
    assert extract_features("completions", {"prompt": [1, 2, 3]}, POOL, est).prompt_tokens == 3
    assert extract_features("completions", {"prompt": [[1, 2], [3]]}, POOL, est).prompt_tokens == 3
    assert extract_features("completions", {"prompt": ["ab" * 8, "cd" * 8]}, POOL, est).prompt_tokens == 8


def test_tool_definitions_count_toward_the_prompt() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with_tools = extract_features("chat", chat("hi", tools=tools), POOL, TokenEstimator())
    without = extract_features("chat", chat("hi"), POOL, TokenEstimator())
    assert with_tools.tools and not without.tools
    assert with_tools.prompt_tokens > without.prompt_tokens


def test_output_budget_sampling_and_format_fields() -> None:
    body = chat(
        "hi",
        max_tokens=100,
        max_completion_tokens=300,
        stream=True,
        temperature=0,
        n=2,
        response_format={"type": "json_schema", "json_schema": {}},
    )
    f = extract_features("/v1/chat/completions", body, POOL, TokenEstimator())
    assert (f.endpoint, f.max_output_tokens, f.stream, f.temperature, f.n) == ("chat", 300, True, 0.0, 2)
    assert f.response_format == "json_schema"
    assert needed_tokens(f) == f.prompt_tokens + 300


def test_missing_or_malformed_fields_fall_back_to_defaults() -> None:
    body = {"model": "m", "messages": "not a list", "max_tokens": "big", "temperature": True, "n": 0}
    f = extract_features("chat", body, POOL, TokenEstimator())
    assert (f.prompt_tokens, f.max_output_tokens, f.temperature, f.n, f.stream) == (0, None, None, 1, False)
    assert needed_tokens(f) == 256  # the default output budget


def test_pool_inflight_is_the_sum_over_the_pool() -> None:
    assert extract_features("chat", chat("x"), POOL, TokenEstimator()).pool_inflight == 5


def test_the_estimator_learns_per_backend_and_the_pool_uses_the_densest() -> None:
    est = TokenEstimator()
    est.observe("a", prompt_chars=3000, prompt_tokens=1000)  # 3 chars per token
    est.observe("b", prompt_chars=5000, prompt_tokens=1000)
    assert est.chars_per_token("a") == 3.0 and est.chars_per_token("c") == 4.0
    f = extract_features("completions", {"prompt": "z" * 3000}, POOL, est)
    assert f.prompt_tokens == 1000  # the pool counts with the smallest ratio: never under-count


def test_the_estimator_moves_smoothly_and_ignores_tiny_prompts() -> None:
    est = TokenEstimator(alpha=0.5)
    est.observe("a", 4000, 1000)
    est.observe("a", 2000, 1000)
    assert est.chars_per_token("a") == 3.0
    est.observe("a", 10, 1)
    assert est.chars_per_token("a") == 3.0


def test_the_estimator_is_bounded() -> None:
    est = TokenEstimator(max_backends=3)
    for i in range(10):
        est.observe(f"b{i}", 3000, 1000)
    assert [b for b in (f"b{i}" for i in range(10)) if est.chars_per_token(b) == 3.0] == ["b7", "b8", "b9"]
