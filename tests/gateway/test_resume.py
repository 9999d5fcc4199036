"""A stream broken mid-answer is continued on another engine (proxy/resume.py): the request sent there,
the frames spliced into the client's stream, the usage counted as one answer, and where it cannot be
continued, the error frame and [DONE] as before."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import orjson
from gateway_fakes import AsgiClient, settings_for

from gateway.api.reshape import MessagesFromChat
from gateway.backends.registry import Registry
from gateway.proxy.dispatch import Dispatcher, Job
from gateway.proxy.resume import Resume, Transcript, resumable, token_count, tokenize_body
from gateway.proxy.upstream import MockResponse, MockTransport, UpstreamBroken
from gateway.records import RequestRecord
from gateway.stats.measurement import Measurement

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
BROKE = UpstreamBroken("the backend's response broke off")


def frame(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


def chunk(
    text: str | None = None, *, ident: str = "a-1", role: bool = False, finish: str | None = None
) -> bytes:
    delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
    if text is not None:
        delta["content"] = text
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return frame({"id": ident, "created": 7 if ident == "a-1" else 9, "model": "m", "choices": [choice]})


def usage(prompt: int, completion: int, ident: str) -> bytes:
    counts = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return frame({"id": ident, "created": 9, "model": "m", "choices": [], "usage": counts})


DONE = b"data: [DONE]\n\n"


class Broken(MockResponse):
    """A stream that sends `chunks`, then breaks."""

    async def iter_chunks(self, first_token: Any = None) -> Any:
        for one in self.chunks:
            await asyncio.sleep(0)
            yield one
        raise BROKE


class Backends:
    """Per backend, its stream answer and its tokenizer's count; every request each was sent."""

    def __init__(self, streams: Mapping[str, MockResponse], counts: Mapping[str, int | None]) -> None:
        self.streams, self.counts = streams, counts
        self.sent: list[tuple[str, str, dict[str, Any]]] = []  # (backend, path, body)

    async def __call__(self, url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        backend, _, path = url.removeprefix("http://").partition(".invalid")
        self.sent.append((backend, path, orjson.loads(body)))
        if path == "/tokenize":
            count = self.counts.get(backend)
            if count is None:
                return MockResponse(404, [b'{"detail":"Not Found"}'])
            return MockResponse(200, [orjson.dumps({"count": count, "max_model_len": 4096})])
        return self.streams[backend]


def run_dispatch(
    backends: Backends, body: dict[str, Any], endpoint: str = "chat"
) -> tuple[bytes, list[RequestRecord]]:
    settings = settings_for({"a": "http://a.invalid", "b": "http://b.invalid"})
    registry = Registry(settings)
    records: list[RequestRecord] = []
    dispatcher = Dispatcher(registry, MockTransport(backends), max_attempts=3, observers=[records.append])
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    job = Job("r1", endpoint, path, registry.pools[0], body, orjson.dumps(body), 0.0, "default", ("a", "b"))
    job.stream = True
    client = AsgiClient()
    asyncio.run(dispatcher.run(job, client.receive, client.send))
    return b"".join(m.get("body", b"") for m in client.sent if m["type"] == "http.response.body"), records


def events(raw: bytes) -> list[Any]:
    return [
        orjson.loads(part[6:]) if part[6:] != b"[DONE]" else "[DONE]"
        for part in raw.split(b"\n\n")
        if part.startswith(b"data: ")
    ]


def text_of(parsed: list[Any]) -> str:
    return "".join(
        c["delta"].get("content") or "" for e in parsed if isinstance(e, dict) for c in e.get("choices", [])
    )


def test_a_chat_stream_broken_mid_answer_is_finished_by_another_engine_as_one_stream() -> None:
    a = Broken(200, [chunk(role=True), chunk("Hel"), chunk("lo")], "text/event-stream")
    rest = [chunk(role=True, ident="b-9"), chunk(" world", ident="b-9"), chunk(finish="length", ident="b-9")]
    b = MockResponse(200, [*rest, usage(13, 8, "b-9"), DONE], "text/event-stream")
    backends = Backends({"a": a, "b": b}, {"b": 2})
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    raw, records = run_dispatch(backends, body)

    parsed = events(raw)
    assert text_of(parsed) == "Hello world" and parsed[-1] == "[DONE]"
    assert not any(isinstance(e, dict) and "error" in e for e in parsed)
    assert sum(1 for e in parsed if isinstance(e, dict) and "role" in str(e.get("choices"))) == 1
    assert {(e["id"], e["created"]) for e in parsed if isinstance(e, dict)} == {("a-1", 7)}
    # One answer's usage: the prompt as the client sent it, every token generated.
    assert parsed[-2]["usage"] == {"prompt_tokens": 11, "completion_tokens": 10, "total_tokens": 21}
    # b counted the text the client had with its own tokenizer, then continued from it.
    (_, _, tokenized), (_, path, continued) = [s for s in backends.sent if s[0] == "b"]
    assert tokenized["prompt"] == "Hello" and path == "/v1/chat/completions"
    assert continued["messages"][-1] == {"role": "assistant", "content": "Hello"}
    assert continued["continue_final_message"] is True and continued["add_generation_prompt"] is False
    assert continued["max_tokens"] == 8
    (record,) = records
    assert (record.status, record.error, record.backend, record.resumed_from) == (200, None, "b", ["a"])
    assert record.output_tokens == 10 and record.prompt_tokens == 11
    assert [backend for backend, _ in record.failures] == ["a"]


def test_a_completion_is_continued_from_its_prompt_and_text_with_usage_kept_away() -> None:
    def text(t: str | None, ident: str = "a-1", finish: str | None = None) -> bytes:
        choice = {"index": 0, "text": t or "", "finish_reason": finish}
        return frame({"id": ident, "created": 7, "model": "m", "choices": [choice]})

    a = Broken(200, [text("one"), text(" two")], "text/event-stream")
    b = MockResponse(200, [text(" three", "b-2"), text(None, "b-2", "stop"), usage(9, 1, "b-2"), DONE])
    b.content_type = "text/event-stream"
    backends = Backends({"a": a, "b": b}, {"b": 2})
    body = {"model": "m", "prompt": "count:", "max_tokens": 3, "stream": True}
    settings = settings_for({"a": "http://a.invalid", "b": "http://b.invalid"})
    registry = Registry(settings)
    dispatcher = Dispatcher(registry, MockTransport(backends), max_attempts=3)
    job = Job(
        "r1",
        "completions",
        "/v1/completions",
        registry.pools[0],
        body,
        orjson.dumps(body),
        0.0,
        "d",
        ("a", "b"),
    )
    job.stream, job.add_usage = True, True
    client = AsgiClient()
    asyncio.run(dispatcher.run(job, client.receive, client.send))
    raw = b"".join(m.get("body", b"") for m in client.sent if m["type"] == "http.response.body")

    parsed = events(raw)
    assert "".join(c["text"] for e in parsed if isinstance(e, dict) for c in e["choices"]) == "one two three"
    assert not any(isinstance(e, dict) and "usage" in e for e in parsed) and parsed[-1] == "[DONE]"
    continued = [s[2] for s in backends.sent if s[0] == "b" and s[1] == "/v1/completions"][0]
    assert continued["prompt"] == "count:one two" and continued["max_tokens"] == 1
    assert continued["stream_options"] == {"include_usage": True}


def test_no_engine_able_to_continue_ends_the_stream_with_an_error_frame_saying_why() -> None:
    a = Broken(200, [chunk(role=True), chunk("Hel")], "text/event-stream")
    b = MockResponse(200, [chunk(" x", ident="b-9"), DONE], "text/event-stream")
    backends = Backends({"a": a, "b": b}, {"b": None})  # b has no tokenizer endpoint
    raw, records = run_dispatch(backends, {**CHAT, "stream": True})

    parsed = events(raw)
    assert text_of(parsed) == "Hel" and parsed[-1] == "[DONE]"
    error = parsed[-2]["error"]
    assert error["code"] == "upstream_stream_error" and "continuing it failed" in error["message"]
    assert not [s for s in backends.sent if s[1] == "/v1/chat/completions" and s[0] == "b"]
    (record,) = records
    assert record.error is not None and record.resumed_from == ["a"]


def test_a_stream_that_was_not_plain_text_is_not_continued() -> None:
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{"}}
    tool = frame(
        {"id": "a-1", "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}
    )
    a = Broken(200, [chunk(role=True), tool], "text/event-stream")
    backends = Backends({"a": a, "b": MockResponse(200, [DONE], "text/event-stream")}, {"b": 1})
    raw, records = run_dispatch(backends, {**CHAT, "stream": True})

    assert events(raw)[-2]["error"]["code"] == "upstream_stream_error"
    assert [s[0] for s in backends.sent] == ["a"] and records[0].resumed_from == []


def test_a_continued_request_is_an_error_sample_of_the_engine_that_broke_and_no_timing_of_either() -> None:
    record = RequestRecord("r", "m", "chat", "default", True, backend="b", status=200, ttft=0.1, e2e=2.0)
    record.resumed_from.append("a")
    settings = settings_for({"a": "http://a.invalid", "b": "http://b.invalid"})
    measurement = Measurement(settings.measurement, settings.backends, None, None)
    measurement.observe(record)
    recorder = measurement.recorder
    assert recorder.samples("b", "default") == ()
    (sample,) = recorder.samples("a", "default")
    assert sample.error


def test_an_engine_failed_over_before_the_first_byte_is_an_error_sample_of_that_engine() -> None:
    """The client saw b's answer only, but routing to a also cost the failover: a's error rate says so,
    and b keeps its timing."""
    record = RequestRecord("r", "m", "chat", "default", True, backend="b", status=200, ttft=0.1, e2e=2.0)
    record.failures.append(("a", "HTTP 500"))
    settings = settings_for({"a": "http://a.invalid", "b": "http://b.invalid"})
    measurement = Measurement(settings.measurement, settings.backends, None, None)
    measurement.observe(record)
    (failed,) = measurement.recorder.samples("a", "default")
    (answered,) = measurement.recorder.samples("b", "default")
    assert failed.error and failed.ttft is None
    assert not answered.error and answered.ttft is not None


def test_what_can_be_continued() -> None:
    assert resumable("chat", CHAT, stream=True)
    assert resumable("completions", {"prompt": "x"}, stream=True)
    assert not resumable("chat", CHAT, stream=False)
    assert not resumable("messages", CHAT, stream=True)
    assert not resumable("completions", {"prompt": ["x", "y"]}, stream=True)
    for extra in (
        {"n": 2},
        {"response_format": {"type": "json_object"}},
        {"guided_json": {}},
        {"tool_choice": "required"},
        {"echo": True},
    ):
        assert not resumable("chat", {**CHAT, **extra}, stream=True), extra
    assert resumable(
        "chat", {**CHAT, "response_format": {"type": "text"}, "tool_choice": "auto"}, stream=True
    )


def test_a_transcript_keeps_the_text_and_the_first_frame_s_identity() -> None:
    transcript = Transcript(chat=True)
    for event in (
        {"id": "x", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {"id": "x", "choices": [{"index": 0, "delta": {"content": "ab"}}]},
        {"id": "y", "choices": [{"index": 0, "delta": {"content": "c"}, "finish_reason": None}]},
    ):
        transcript.take(event, event["choices"])
    assert transcript.text == "abc" and transcript.head == {"id": "x", "created": 1, "model": "m"}
    assert transcript.plain and not transcript.finished
    transcript.take({}, [{"index": 0, "delta": {"reasoning_content": "hm"}}])
    assert not transcript.plain
    resume = Resume(Transcript(chat=False))
    resume.transcript.take({}, [{"index": 0, "text": "z", "finish_reason": "stop"}])
    assert not resume.can_continue(answered=True)  # finished: nothing to continue


def test_a_continuation_s_limits_shrink_by_what_was_generated() -> None:
    resume = Resume(Transcript(chat=True, parts=["a b"]))
    body = {**CHAT, "max_completion_tokens": 5, "min_tokens": 1}
    continued = resume.body(body, "chat", "served", generated=2)
    assert continued is not None
    assert (continued["max_tokens"], continued["max_completion_tokens"], continued["min_tokens"]) == (8, 3, 0)
    assert continued["model"] == "served" and CHAT["messages"] == [{"role": "user", "content": "hi"}]
    assert resume.body(body, "chat", "served", generated=5) is None  # nothing left to generate


def test_tokenizer_requests_and_answers_per_flavor() -> None:
    assert tokenize_body("llamacpp", "m", "hi") == {"content": "hi", "add_special": False}
    assert tokenize_body("vllm", "m", "hi") == {"model": "m", "prompt": "hi", "add_special_tokens": False}
    assert token_count({"count": 3, "tokens": [1]}) == 3
    assert token_count({"tokens": [1, 2]}) == 2
    assert token_count({"detail": "no"}) is None and token_count([1]) is None


def test_an_engine_s_own_error_frame_mid_answer_is_continued_and_one_blaming_the_request_is_not() -> None:
    engine_error = frame({"error": {"code": 500, "message": "EngineCore encountered an issue"}})
    a = MockResponse(200, [chunk(role=True), chunk("Hel"), engine_error, DONE], "text/event-stream")
    b = MockResponse(
        200, [chunk(role=True, ident="b-9"), chunk("lo", ident="b-9"), DONE], "text/event-stream"
    )
    backends = Backends({"a": a, "b": b}, {"b": 1})
    raw, records = run_dispatch(backends, {**CHAT, "stream": True})
    parsed = events(raw)
    assert text_of(parsed) == "Hello" and parsed[-1] == "[DONE]" and parsed.count("[DONE]") == 1
    assert not any(isinstance(e, dict) and "error" in e for e in parsed)
    assert records[0].resumed_from == ["a"] and "HTTP 500" in records[0].failures[0][1]

    own_fault = frame({"error": {"code": 400, "message": "bad logits processor"}})
    a = MockResponse(200, [chunk(role=True), chunk("Hel"), own_fault, DONE], "text/event-stream")
    backends = Backends({"a": a, "b": b}, {"b": 1})
    raw, records = run_dispatch(backends, {**CHAT, "stream": True})
    error = events(raw)[-2]["error"]  # the engine's words, in the gateway's error shape
    assert error["message"] == "bad logits processor" and error["type"] == "invalid_request_error"
    assert [s[0] for s in backends.sent] == ["a"]
    assert records[0].resumed_from == []


def test_a_messages_request_translated_to_chat_is_continued_as_chat_under_the_anthropic_stream() -> None:
    a = Broken(200, [chunk(role=True), chunk("Hel"), chunk("lo")], "text/event-stream")
    rest = [chunk(role=True, ident="b-9"), chunk(" world", ident="b-9"), chunk(finish="length", ident="b-9")]
    b = MockResponse(200, [*rest, usage(13, 8, "b-9"), DONE], "text/event-stream")
    backends = Backends({"a": a, "b": b}, {"b": 2})
    chat = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    settings = settings_for({"a": "http://a.invalid", "b": "http://b.invalid"})
    registry = Registry(settings)
    dispatcher = Dispatcher(registry, MockTransport(backends), max_attempts=3)
    raw_chat = orjson.dumps(chat)
    job = Job(
        "r1", "messages", "/v1/chat/completions", registry.pools[0], chat, raw_chat, 0.0, "d", ("a", "b")
    )
    job.stream = True
    client = AsgiClient()
    asyncio.run(dispatcher.run(job, client.receive, MessagesFromChat(client.send, "m", 5)))
    raw = b"".join(m.get("body", b"") for m in client.sent if m["type"] == "http.response.body")

    data = [orjson.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: ")]
    kinds = [event["type"] for event in data]
    text = "".join(e["delta"].get("text", "") for e in data if e["type"] == "content_block_delta")
    assert text == "Hello world" and "error" not in kinds
    assert kinds.count("message_start") == 1 and kinds[-1] == "message_stop"
    assert [e["usage"]["output_tokens"] for e in data if e["type"] == "message_delta"] == [10]


def test_a_stream_ended_cleanly_before_its_finish_and_done_is_continued_by_another_engine() -> None:
    a = MockResponse(200, [chunk(role=True), chunk("Hel"), chunk("lo")], "text/event-stream")  # then EOF
    rest = [chunk(role=True, ident="b-9"), chunk(" world", ident="b-9"), chunk(finish="stop", ident="b-9")]
    b = MockResponse(200, [*rest, DONE], "text/event-stream")
    raw, records = run_dispatch(Backends({"a": a, "b": b}, {"b": 2}), {**CHAT, "stream": True})

    parsed = events(raw)
    assert text_of(parsed) == "Hello world" and parsed[-1] == "[DONE]"
    assert not any(isinstance(e, dict) and "error" in e for e in parsed)
    (record,) = records
    assert record.resumed_from == ["a"] and record.stream_breaks == [("a", "stream_ended_early")]


def test_a_stream_ended_early_that_no_engine_continues_ends_with_an_error_frame() -> None:
    a = MockResponse(200, [chunk(role=True), chunk("Hel")], "text/event-stream")
    b = MockResponse(200, [chunk(" x", ident="b-9"), DONE], "text/event-stream")
    raw, records = run_dispatch(Backends({"a": a, "b": b}, {"b": None}), {**CHAT, "stream": True})

    parsed = events(raw)
    assert text_of(parsed) == "Hel" and parsed[-1] == "[DONE]"
    assert "before its finish_reason and [DONE]" in parsed[-2]["error"]["message"]
    (record,) = records
    assert record.error is not None and record.stream_breaks == [("a", "stream_ended_early")]


def test_a_stream_ended_after_its_finish_without_done_gets_its_done_and_is_no_break() -> None:
    a = MockResponse(200, [chunk(role=True), chunk("Hi"), chunk(finish="stop")], "text/event-stream")
    backends = Backends({"a": a, "b": MockResponse(200, [DONE], "text/event-stream")}, {"b": 1})
    raw, records = run_dispatch(backends, {**CHAT, "stream": True})

    parsed = events(raw)
    assert text_of(parsed) == "Hi" and parsed[-1] == "[DONE]" and parsed.count("[DONE]") == 1
    assert [s[0] for s in backends.sent] == ["a"]
    (record,) = records
    assert record.error is None and record.stream_breaks == []


def test_a_line_that_never_ends_is_a_break_continued_on_another_engine() -> None:
    endless = [b"data: "] + [b"x" * 65536] * 200  # 13 MB of one frame, past the 8 MiB cap
    a = MockResponse(200, [chunk(role=True), chunk("Hel"), chunk("lo"), *endless], "text/event-stream")
    rest = [chunk(" world", ident="b-9"), chunk(finish="stop", ident="b-9"), DONE]
    b = MockResponse(200, rest, "text/event-stream")
    raw, records = run_dispatch(Backends({"a": a, "b": b}, {"b": 2}), {**CHAT, "stream": True})

    parsed = events(raw)
    assert text_of(parsed) == "Hello world" and parsed[-1] == "[DONE]" and b"xxxx" not in raw
    (record,) = records
    assert record.resumed_from == ["a"] and record.stream_breaks == [("a", "frame_too_large")]


def test_a_line_that_never_ends_before_any_content_fails_over() -> None:
    endless = [b"data: "] + [b"x" * 65536] * 200
    a = MockResponse(200, [chunk(role=True), *endless], "text/event-stream")
    rest = [chunk("hi", ident="b-9"), chunk(finish="stop", ident="b-9"), DONE]
    b = MockResponse(200, rest, "text/event-stream")
    raw, records = run_dispatch(Backends({"a": a, "b": b}, {"b": 2}), {**CHAT, "stream": True})

    parsed = events(raw)
    assert text_of(parsed) == "hi" and parsed[-1] == "[DONE]"
    (record,) = records
    assert record.backend == "b" and "over 8388608 bytes" in record.failures[0][1]
