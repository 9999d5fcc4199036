"""ChatToMessagesStream: vLLM-framed chat streams become Messages event streams in Anthropic's order,
with the blocks and fields llama-server's own Messages endpoint sends for the same answer."""

from __future__ import annotations

from typing import Any

import anthropic
import pydantic

from gateway.translate import ChatToMessagesStream
from tests.translate.sse_fixtures import anthropic_events, data_payloads, fixture_events

Events = list[tuple[str, dict[str, Any]]]
STREAM_EVENT = pydantic.TypeAdapter(anthropic.types.RawMessageStreamEvent)


def translate(fixture: str, model: str = "Qwen/Qwen3-8B") -> Events:
    stream = ChatToMessagesStream(model)
    raw = b"".join(b"".join(stream.feed(payload)) for payload in data_payloads(fixture))
    assert stream.done and stream.close() == []
    return anthropic_events(raw)


def blocks(events: Events) -> list[dict[str, Any]]:
    """Each content block with its start fields and the concatenation of its deltas."""
    found: dict[int, dict[str, Any]] = {}
    for name, data in events:
        if name == "content_block_start":
            found[data["index"]] = {**data["content_block"], "deltas": ""}
        elif name == "content_block_delta":
            delta = data["delta"]
            text = delta.get("text", delta.get("thinking", delta.get("partial_json", "")))
            found[data["index"]]["deltas"] += text
    for block in found.values():
        # llama-server omits the empty input of a tool_use start and the signature of a thinking start.
        block.pop("input", None)
        block.pop("signature", None)
    return [found[i] for i in sorted(found)]


def assert_anthropic_order(events: Events) -> None:
    """message_start first, blocks one at a time (start, deltas, stop), message_delta, message_stop."""
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    open_index = None
    for name, data in events[1:-2]:
        if name == "content_block_start":
            assert open_index is None
            open_index = data["index"]
        elif name in ("content_block_delta", "content_block_stop"):
            assert data["index"] == open_index
            open_index = None if name == "content_block_stop" else open_index
        else:
            assert name == "ping"
    assert open_index is None
    for name, data in events:
        if name != "ping":  # the SDK skips pings before parsing
            STREAM_EVENT.validate_python(data)


def test_text_stream_matches_llama_servers_messages_stream() -> None:
    ours, theirs = translate("vllm_chat_stream_text.sse"), fixture_events("llamacpp_messages_stream_text.sse")
    assert_anthropic_order(ours)
    assert [n for n, _ in ours if n != "ping"][:2] == ["message_start", "content_block_start"]
    assert (
        blocks(ours)
        == blocks(theirs)
        == [
            {"type": "thinking", "thinking": "", "deltas": "The user greets me."},
            {"type": "text", "text": "", "deltas": "Hello! How can I help?"},
        ]
    )
    ours_delta, theirs_delta = ours[-2][1], theirs[-2][1]
    assert ours_delta["delta"] == theirs_delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert ours_delta["usage"]["output_tokens"] == theirs_delta["usage"]["output_tokens"] == 12
    # The thinking block ends with a signature, as clients that replay thinking expect.
    signatures = [
        d for n, d in ours if n == "content_block_delta" and d["delta"]["type"] == "signature_delta"
    ]
    assert [s["index"] for s in signatures] == [0]


def test_tool_stream_matches_llama_servers_messages_stream() -> None:
    ours, theirs = translate("vllm_chat_stream_tool.sse"), fixture_events("llamacpp_messages_stream_tool.sse")
    assert_anthropic_order(ours)
    assert blocks(ours) == blocks(theirs)
    tool = {"type": "tool_use", "id": "chatcmpl-tool-8a1b", "name": "get_weather"}
    assert blocks(ours)[1] == {**tool, "deltas": '{"city": "Paris"}'}
    assert ours[-2][1]["delta"]["stop_reason"] == theirs[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert ours[-2][1]["usage"] == {"output_tokens": 16, "input_tokens": 88}


def test_message_start_carries_the_input_tokens_known_so_far() -> None:
    stream = ChatToMessagesStream("m", input_tokens=40)
    first = anthropic_events(
        b"".join(stream.feed({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {}}]}))
    )
    assert [n for n, _ in first] == ["message_start", "ping"]
    assert first[0][1]["message"]["usage"] == {"input_tokens": 40, "output_tokens": 0}
    assert first[0][1]["message"]["id"] == "msg_1"


def test_an_error_frame_becomes_an_error_event_and_ends_the_stream() -> None:
    stream = ChatToMessagesStream("m")
    payloads = data_payloads("vllm_chat_stream_text.sse")[:3]
    raw = b"".join(b"".join(stream.feed(p)) for p in payloads)
    error = {
        "error": {"message": "EngineCore encountered an issue.", "type": "InternalServerError", "code": 500}
    }
    raw += b"".join(stream.feed(error))
    events = anthropic_events(raw)
    assert events[-1] == (
        "error",
        {"type": "error", "error": {"type": "api_error", "message": error["error"]["message"]}},
    )
    assert stream.done and stream.feed(b"[DONE]") == [] and stream.close() == []


def test_sglang_flat_error_frame_and_overload_status() -> None:
    stream = ChatToMessagesStream("m")
    events = anthropic_events(b"".join(stream.feed({"object": "error", "message": "busy", "code": 503})))
    assert events == [("error", {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})]


def test_upstream_that_ends_without_done_is_closed_in_order() -> None:
    stream = ChatToMessagesStream("m")
    payloads = data_payloads("vllm_chat_stream_text.sse")[:5]  # cut after the first text delta
    raw = b"".join(b"".join(stream.feed(p)) for p in payloads) + b"".join(stream.close())
    events = anthropic_events(raw)
    assert_anthropic_order(events)
    assert events[-2][1]["delta"]["stop_reason"] == "end_turn"
