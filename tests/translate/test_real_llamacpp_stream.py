"""ChatToMessagesStream against streams recorded from a real llama-server (capture_real_llamacpp.py): its
chat stream, translated, must have the structure of the same engine's own Messages stream for the same
greedy request: event order, content blocks, stop_reason and usage."""

from __future__ import annotations

from typing import Any

from gateway.translate import ChatToMessagesStream
from tests.translate.capture_real_llamacpp import CHAT_FIXTURE, MESSAGES_FIXTURE
from tests.translate.sse_fixtures import anthropic_events, data_payloads, fixture_events
from tests.translate.test_messages_stream import assert_anthropic_order, blocks

Events = list[tuple[str, dict[str, Any]]]


def translated_chat(model: str = "gemma") -> Events:
    stream = ChatToMessagesStream(model)
    raw = b"".join(b"".join(stream.feed(payload)) for payload in data_payloads(CHAT_FIXTURE))
    assert stream.done and stream.close() == []
    return anthropic_events(raw)


def shape(events: Events) -> list[tuple[str, Any]]:
    """The event sequence without text: each event's name and the block index or kind it concerns."""
    out: list[tuple[str, Any]] = []
    for name, data in events:
        if name == "ping":
            continue
        if name == "content_block_start":
            out.append((name, (data["index"], data["content_block"]["type"])))
        elif name == "content_block_delta":
            out.append((name, (data["index"], data["delta"]["type"])))
        elif name == "content_block_stop":
            out.append((name, data["index"]))
        else:
            out.append((name, None))
    return out


def test_the_recordings_are_real_and_not_trivial() -> None:
    theirs = fixture_events(MESSAGES_FIXTURE)
    assert_anthropic_order(theirs)
    assert sum(1 for name, _ in theirs if name == "content_block_delta") >= 2
    assert len(data_payloads(CHAT_FIXTURE)) >= 3 and data_payloads(CHAT_FIXTURE)[-1] == b"[DONE]"


def test_translated_chat_stream_has_the_engines_own_messages_structure() -> None:
    ours, theirs = translated_chat(), fixture_events(MESSAGES_FIXTURE)
    assert_anthropic_order(ours)
    assert shape(ours) == shape(theirs)
    # Same engine, same greedy request: the text agrees too (blocks() joins each block's deltas).
    assert blocks(ours) == blocks(theirs)


def test_translated_stop_reason_and_usage_match_the_engines() -> None:
    ours, theirs = translated_chat(), fixture_events(MESSAGES_FIXTURE)
    ours_delta, theirs_delta = ours[-2][1], theirs[-2][1]
    assert ours_delta["delta"] == theirs_delta["delta"]
    assert ours_delta["delta"]["stop_reason"] in ("end_turn", "max_tokens", "stop_sequence")
    assert ours_delta["usage"]["output_tokens"] == theirs_delta["usage"]["output_tokens"] > 0
    start = next(data for name, data in ours if name == "message_start")["message"]
    assert start["role"] == "assistant" and start["content"] == [] and start["stop_reason"] is None
