"""What an engine answers is checked where it is read (proxy/stream.py, proxy/relay.py): a data frame
that is not JSON, frames after `[DONE]`, a 200 to a stream request that is not SSE, a 200 whole answer
that is not JSON. None reaches the client as if fine; another engine serves where it can."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import orjson
from gateway_fakes import AsgiClient, settings_for

from gateway.backends.registry import Registry
from gateway.proxy.dispatch import Dispatcher, Job
from gateway.proxy.upstream import MockResponse, MockTransport
from gateway.records import RequestRecord

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
DONE = b"data: [DONE]\n\n"
SSE = "text/event-stream"


def chunk(text: str | None = None, finish: str | None = None, ident: str = "a-1") -> bytes:
    delta = {} if text is None else {"content": text}
    event = {
        "id": ident,
        "created": 7,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(event) + b"\n\n"


WHOLE = orjson.dumps(
    {
        "id": "b-1",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "from b"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
)


def run(answers: Mapping[str, MockResponse], stream: bool) -> tuple[int, bytes, RequestRecord, list[str]]:
    """One request through dispatch to backends a then b: the client's status and bytes, the record, and
    the backends sent the request (the tokenizer of b counts any text to continue)."""
    sent: list[str] = []

    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        backend, _, path = url.removeprefix("http://").partition(".invalid")
        if path == "/tokenize":
            return MockResponse(200, [orjson.dumps({"count": 1, "max_model_len": 4096})])
        sent.append(backend)
        return answers[backend]

    registry = Registry(settings_for({"a": "http://a.invalid", "b": "http://b.invalid"}))
    records: list[RequestRecord] = []
    dispatcher = Dispatcher(registry, MockTransport(handler), max_attempts=3, observers=[records.append])
    body: dict[str, Any] = {**CHAT, "stream": stream}
    job = Job(
        "r1",
        "chat",
        "/v1/chat/completions",
        registry.pools[0],
        body,
        orjson.dumps(body),
        0.0,
        "default",
        ("a", "b"),
    )
    job.stream = stream
    client = AsgiClient()
    asyncio.run(dispatcher.run(job, client.receive, client.send))
    status = next(m["status"] for m in client.sent if m["type"] == "http.response.start")
    raw = b"".join(m.get("body", b"") for m in client.sent if m["type"] == "http.response.body")
    return status, raw, records[0], sent


def text_and_frames(raw: bytes) -> tuple[str, list[Any]]:
    frames = [
        orjson.loads(part[6:]) if part[6:] != b"[DONE]" else "[DONE]"
        for part in raw.split(b"\n\n")
        if part.startswith(b"data: ")
    ]
    text = "".join(
        c["delta"].get("content") or "" for e in frames if isinstance(e, dict) for c in e.get("choices", [])
    )
    return text, frames


def test_a_data_frame_that_is_not_json_breaks_the_stream_and_it_is_continued() -> None:
    a = MockResponse(200, [chunk("Hel"), b"data: <html>oops</html>\n\n", chunk("never")], SSE)
    b = MockResponse(200, [chunk("lo", ident="b-1"), chunk(finish="stop", ident="b-1"), DONE], SSE)
    status, raw, record, sent = run({"a": a, "b": b}, stream=True)

    text, frames = text_and_frames(raw)  # every frame the client got parses
    assert status == 200 and text == "Hello" and frames[-1] == "[DONE]" and b"html" not in raw
    assert record.stream_breaks == [("a", "bad_frame")] and sent == ["a", "b"]


def test_nothing_after_done_reaches_the_client() -> None:
    after = chunk("extra") + DONE
    a = MockResponse(200, [chunk("Hi"), chunk(finish="stop") + DONE + after, after], SSE)
    status, raw, record, sent = run({"a": a, "b": MockResponse(200, [DONE], SSE)}, stream=True)

    text, frames = text_and_frames(raw)
    assert status == 200 and text == "Hi" and frames.count("[DONE]") == 1 and frames[-1] == "[DONE]"
    assert record.error is None and sent == ["a"]


def test_an_html_page_answered_200_to_a_stream_request_fails_over() -> None:
    page = MockResponse(200, [b"<html><body>Sign in</body></html>"], "text/html")
    b = MockResponse(200, [chunk("ok", ident="b-1"), chunk(finish="stop", ident="b-1"), DONE], SSE)
    status, raw, record, sent = run({"a": page, "b": b}, stream=True)

    text, _ = text_and_frames(raw)
    assert status == 200 and text == "ok" and b"html" not in raw
    assert sent == ["a", "b"] and "not SSE" in record.failures[0][1]


def test_invalid_json_answered_200_to_a_whole_request_fails_over() -> None:
    broken = MockResponse(200, [b'{"id": "a-1", "choices": [{"message": '], "application/json")
    status, raw, record, sent = run({"a": broken, "b": MockResponse(200, [WHOLE])}, stream=False)

    assert status == 200 and orjson.loads(raw)["choices"][0]["message"]["content"] == "from b"
    assert sent == ["a", "b"] and "not a JSON object" in record.failures[0][1]
    assert record.output_tokens == 2  # the usage of the answer that went out
