"""SseMeter: frame splitting, pass-through bytes, usage stripping and the TTFT/ITL measures."""

from __future__ import annotations

import time

import orjson
import pytest

from gateway.proxy.stream import BadStream, SseMeter


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def chunk(content: str | None = None, **extra: object) -> bytes:
    delta = {} if content is None else {"content": content}
    return b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": delta}], **extra}) + b"\n\n"


USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}\n\n'


def test_frames_pass_through_byte_for_byte() -> None:
    stream = chunk("a") + chunk("b") + b"data: [DONE]\n\n"
    meter = SseMeter(strip_usage=False)
    assert meter.feed(stream) == stream
    assert meter.done


def test_a_frame_split_across_reads_is_forwarded_once_complete() -> None:
    frame = chunk("hello")
    meter = SseMeter(strip_usage=False)
    assert meter.feed(frame[:7]) == b""
    assert meter.feed(frame[7:]) == frame
    assert meter.content_frames == 1


def test_crlf_framing_and_comments_are_accepted_and_kept() -> None:
    stream = b": ping - 2026\r\n\r\n" + chunk("a").replace(b"\n\n", b"\r\n\r\n") + b"data: [DONE]\r\n\r\n"
    meter = SseMeter(strip_usage=True)
    assert meter.feed(stream) == stream
    assert meter.content_frames == 1 and meter.done


def test_usage_only_frame_is_stripped_when_the_gateway_asked_for_it() -> None:
    meter = SseMeter(strip_usage=True)
    out = meter.feed(chunk("a") + USAGE + b"data: [DONE]\n\n")
    assert out == chunk("a") + b"data: [DONE]\n\n"
    assert meter.usage == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}


def test_usage_only_frame_is_kept_when_the_client_asked_for_it() -> None:
    meter = SseMeter(strip_usage=False)
    assert USAGE in meter.feed(chunk("a") + USAGE)


def test_usage_on_a_content_frame_is_never_stripped() -> None:
    frame = chunk("a", usage={"completion_tokens": 1})
    meter = SseMeter(strip_usage=True)
    assert meter.feed(frame) == frame
    assert meter.usage == {"completion_tokens": 1}


def test_ttft_is_the_first_content_frame_not_the_role_frame() -> None:
    clock = Ticks()
    meter = SseMeter(strip_usage=False, clock=clock)
    clock.now = 1.0
    meter.feed(b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n')
    clock.now = 2.0
    meter.feed(chunk("a"))
    clock.now = 2.25
    meter.feed(chunk("b"))
    clock.now = 2.75
    meter.feed(chunk("c") + chunk(None))  # the finish frame has no content: not a token
    assert meter.first_token_at == 2.0
    assert meter.itl == [0.25, 0.5]


def test_reasoning_and_tool_call_deltas_count_as_tokens() -> None:
    meter = SseMeter(strip_usage=False)
    meter.feed(b'data: {"choices":[{"delta":{"reasoning_content":"hm"}}]}\n\n')
    meter.feed(b'data: {"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}\n\n')
    meter.feed(b'data: {"choices":[{"text":"x"}]}\n\n')
    assert meter.content_frames == 3


def test_error_frame_is_recorded_and_forwarded() -> None:
    frame = b'data: {"error":{"message":"engine failed","code":500}}\n\n'
    meter = SseMeter(strip_usage=True)
    assert meter.feed(frame) == frame
    assert meter.error == {"message": "engine failed", "code": 500}


def test_flush_forwards_a_trailing_frame_without_blank_line() -> None:
    meter = SseMeter(strip_usage=False)
    assert meter.feed(b"data: [DONE]") == b""
    assert meter.flush() == b"data: [DONE]"
    assert meter.done


# `answered`: when a stream is committed to its backend. Before it, nothing reached the client.

ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'


def test_a_role_frame_an_empty_delta_and_a_comment_do_not_answer() -> None:
    meter = SseMeter(strip_usage=True)
    meter.feed(ROLE + b": keep-alive\n\n" + chunk(None) + chunk(""))
    assert not meter.answered


def test_usage_riding_on_the_role_frame_does_not_answer() -> None:
    # vLLM with continuous usage stats puts `usage` on every frame, the role frame included.
    usage = {"prompt_tokens": 4, "completion_tokens": 0, "total_tokens": 4}
    role = orjson.loads(ROLE[6:])
    meter = SseMeter(strip_usage=False)
    meter.feed(b"data: " + orjson.dumps({**role, "usage": usage}) + b"\n\n")
    assert not meter.answered and meter.usage == usage


def test_content_reasoning_and_tool_calls_answer() -> None:
    tool = {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": ""}}]}
    for delta in ({"content": "a"}, {"reasoning": "hm"}, {"reasoning_content": "hm"}, tool):
        meter = SseMeter(strip_usage=False)
        frame = orjson.dumps({"choices": [{"index": 0, "delta": delta}]})
        meter.feed(ROLE + b"data: " + frame + b"\n\n")
        assert meter.answered, delta


def test_a_finish_the_final_usage_frame_an_error_frame_and_done_answer() -> None:
    finish = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n'
    error = b'data: {"error":{"message":"bad","code":400}}\n\n'
    for frame in (finish, USAGE, error, b"data: [DONE]\n\n"):
        meter = SseMeter(strip_usage=True)
        meter.feed(ROLE + frame)
        assert meter.answered, frame


def test_a_frame_past_the_cap_breaks_the_stream_holding_no_more_than_the_cap() -> None:
    meter = SseMeter(strip_usage=False, max_frame_bytes=1 << 20)
    read = b"x" * 65536
    began = time.process_time()
    assert meter.feed(chunk("a") + b"data: ") == chunk("a")  # whole frames before it still go out
    with pytest.raises(BadStream) as broken:
        for _ in range(80 * 16):  # 80 MB of one line that never ends
            meter.feed(read)
            assert len(meter._buf) <= (1 << 20) + len(read)
    assert broken.value.code == "frame_too_large"
    assert time.process_time() - began < 0.5
    with pytest.raises(BadStream):
        meter.flush()  # the end of the stream says so too


def test_a_big_frame_arriving_in_small_reads_is_searched_once() -> None:
    meter = SseMeter(strip_usage=False, max_frame_bytes=16 << 20)
    body = b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": "y" * (8 << 20)}}]})
    began = time.process_time()
    out = [meter.feed(body[i : i + 4096]) for i in range(0, len(body), 4096)]
    out.append(meter.feed(b"\n\n"))
    # Searching the whole buffer on each of the 2,000 reads is ~8 GB of scanning: seconds, not this.
    assert time.process_time() - began < 0.3
    assert b"".join(out) == body + b"\n\n" and meter.first_token_at is not None
