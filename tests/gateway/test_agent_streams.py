"""The stream meter on the Anthropic Messages and Responses event streams: what counts as content (so the
relay holds what comes before it and may fail over), TTFT and inter-token gaps, usage in either API's
spelling, and the end of a stream that has no [DONE]."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.proxy.stream import SseMeter, usage_counts


def event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **data}) + b"\n\n"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_anthropic_head_events_are_held_and_the_first_delta_answers() -> None:
    clock = Clock()
    meter = SseMeter(strip_usage=False, clock=clock)
    head = event("message_start", {"message": {"usage": {"input_tokens": 40, "cache_read_input_tokens": 8}}})
    head += event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    head += event("ping", {})
    assert meter.feed(head) == head  # forwarded untouched, byte for byte
    assert not meter.answered and meter.first_token_at is None
    clock.now = 1.0
    meter.feed(event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Hi"}}))
    assert meter.answered and meter.first_token_at == 1.0


def test_anthropic_deltas_give_itl_and_the_final_usage() -> None:
    clock = Clock()
    meter = SseMeter(strip_usage=False, clock=clock)
    meter.feed(event("message_start", {"message": {"usage": {"input_tokens": 40, "output_tokens": 1}}}))
    for i, delta in enumerate(
        [{"type": "thinking_delta", "thinking": "hm"}, {"type": "text_delta", "text": "a"},
         {"type": "input_json_delta", "partial_json": "{\"x\""}]
    ):  # fmt: skip
        clock.now = 1.0 + 0.1 * i
        meter.feed(event("content_block_delta", {"index": i, "delta": delta}))
    meter.feed(event("message_delta", {"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 17}}))
    meter.feed(event("message_stop", {}))
    assert meter.content_frames == 3 and len(meter.itl) == 2
    assert meter.usage == {"prompt_tokens": 40, "completion_tokens": 17}
    assert meter.done and meter.finished


def test_an_empty_tool_input_delta_is_not_content_but_a_tool_use_start_is() -> None:
    meter = SseMeter(strip_usage=False)
    meter.feed(
        event("content_block_delta", {"index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}})
    )
    assert not meter.answered
    block = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    meter.feed(event("content_block_start", {"index": 0, "content_block": block}))
    assert meter.answered


def test_an_anthropic_error_event_answers_with_the_error() -> None:
    meter = SseMeter(strip_usage=False)
    meter.feed(event("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}}))
    assert meter.answered and meter.error == {"type": "overloaded_error", "message": "Overloaded"}


def test_responses_stream_text_deltas_and_completed_usage() -> None:
    clock = Clock()
    meter = SseMeter(strip_usage=False, clock=clock)
    meter.feed(event("response.created", {"response": {"id": "resp_1", "status": "in_progress"}}))
    meter.feed(event("response.output_item.added", {"item": {"type": "message", "content": []}}))
    assert not meter.answered
    for i in range(4):
        clock.now = 2.0 + i
        meter.feed(event("response.output_text.delta", {"delta": f"w{i}"}))
    done = {"response": {"id": "resp_1", "usage": {"input_tokens": 9, "output_tokens": 4}}}
    meter.feed(event("response.completed", done))
    assert meter.first_token_at == 2.0 and meter.itl == [1.0, 1.0, 1.0]
    assert meter.usage == {"prompt_tokens": 9, "completion_tokens": 4} and meter.done


def test_a_failed_response_is_an_error() -> None:
    meter = SseMeter(strip_usage=False)
    failed = {"response": {"id": "resp_1", "error": {"code": "server_error", "message": "engine died"}}}
    meter.feed(event("response.failed", failed))
    assert meter.error is not None and meter.error["message"] == "engine died"


def test_chat_frames_are_measured_as_before() -> None:
    meter = SseMeter(strip_usage=True)
    role = b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
    assert meter.feed(role) == role and not meter.answered
    meter.feed(b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n')
    assert meter.feed(usage) == b""  # the usage the gateway asked for is still stripped
    assert meter.usage == {"prompt_tokens": 3, "completion_tokens": 1}


def test_usage_counts_reads_every_spelling() -> None:
    assert usage_counts({"prompt_tokens": 5, "completion_tokens": 2}) == (5, 2)
    cached = {
        "input_tokens": 5,
        "cache_creation_input_tokens": 10,
        "cache_read_input_tokens": 20,
        "output_tokens": 2,
    }
    assert usage_counts(cached) == (35, 2)
    assert usage_counts({"output_tokens": 7}) == (None, 7)
    assert usage_counts("nope") is None
