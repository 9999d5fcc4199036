"""Streams under way moved off an engine seen slowed (proxy/moves.py): cut where the planner says, continued
on the next engine of the request's ranking as one stream, and nobody blamed: no breaker failure, no error
sample, and what the moved attempt measured kept as a sample of its engine's pace."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from gateway_fakes import AsgiClient, reliable_dispatcher, settings_for

from gateway.policy.schema import Adaptive
from gateway.proxy.dispatch import Job
from gateway.proxy.move_choice import MoveQuestion, Underway
from gateway.proxy.moves import StreamMoves
from gateway.proxy.reliability import Reliability
from gateway.proxy.upstream import MockResponse
from gateway.records import RequestRecord
from gateway.stats.measurement import Measurement
from tests.gateway.test_resume import CHAT, DONE, Backends, chunk, events, text_of, usage


class Slowed(MockResponse):
    """A stream that sends `chunks`, then goes slow: the rest comes after `pause` seconds."""

    pause: float = 30.0

    async def iter_chunks(self, first_token: Any = None) -> Any:
        for one in self.chunks:
            await asyncio.sleep(0)
            yield one
        await asyncio.sleep(self.pause)
        yield chunk(" later", ident="a-1")
        yield chunk(finish="length")
        yield DONE


class Planner:
    """Moves every stream it is asked about, or none; remembers what it was asked."""

    def __init__(self, move: bool) -> None:
        self.move = move
        self.asked: list[tuple[str, str, list[Underway]]] = []

    def moves(self, question: MoveQuestion) -> list[bool]:
        self.asked.append((question.backend, question.to, list(question.streams)))
        return [self.move] * len(question.streams)


def run_moving(
    a: MockResponse, planner: Planner, b_flavor: str = "vllm", chat: dict[str, Any] = CHAT
) -> tuple[bytes, RequestRecord, Backends, Reliability]:
    rest = [chunk(role=True, ident="b-9"), chunk(" world", ident="b-9"), chunk(finish="length", ident="b-9")]
    b = MockResponse(200, [*rest, usage(13, 8, "b-9"), DONE], "text/event-stream")
    backends = Backends({"a": a, "b": b}, {"b": 2})
    urls = {"a": "http://a.invalid", "b": "http://b.invalid"}
    flavors = [{"name": n, "url": url, "flavor": "vllm" if n == "a" else b_flavor} for n, url in urls.items()]
    settings = settings_for(urls, backends=flavors)
    dispatcher, registry, reliability, records = reliable_dispatcher(settings, backends, max_attempts=3)
    dispatcher.moves = StreamMoves(registry, planner, lambda profile: Adaptive(), interval_s=0.02)
    body = {**chat, "stream": True}
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
    job.stream = True
    client = AsgiClient()
    asyncio.run(dispatcher.run(job, client.receive, client.send))
    raw = b"".join(m.get("body", b"") for m in client.sent if m["type"] == "http.response.body")
    (record,) = records
    return raw, record, backends, reliability


def test_a_stream_the_planner_moves_is_finished_by_the_next_engine_and_its_engine_is_not_blamed() -> None:
    planner = Planner(move=True)
    a = Slowed(200, [chunk(role=True), chunk("Hel"), chunk("lo")], "text/event-stream")
    raw, record, backends, reliability = run_moving(a, planner)

    parsed = events(raw)
    assert text_of(parsed) == "Hello world" and parsed[-1] == "[DONE]"
    assert not any(isinstance(e, dict) and "error" in e for e in parsed)
    # Asked about a's stream, two frames in, eight of its ten tokens left, to go to b (the ranking's next).
    assert planner.asked[0] == ("a", "b", [Underway(0, 2, 8)])
    assert (record.backend, record.resumed_from, record.moved_from, record.failures) == (
        "b",
        ["a"],
        ["a"],
        [],
    )
    assert reliability.breakers["a"].snapshot().window_failures == 0
    ((moved_from, attempt),) = record.moved_attempts
    assert moved_from == "a" and attempt.output_tokens == 2 and attempt.ttft is not None


def test_a_stream_without_a_token_limit_is_put_to_the_planner_with_what_is_left_unknown() -> None:
    """The planner reads what such a stream has left from its answers (move_choice.expected_left)."""
    planner = Planner(move=True)
    a = Slowed(200, [chunk(role=True), chunk("Hel"), chunk("lo")], "text/event-stream")
    unlimited = {key: value for key, value in CHAT.items() if key != "max_tokens"}
    raw, record, _, _ = run_moving(a, planner, chat=unlimited)

    assert planner.asked[0] == ("a", "b", [Underway(0, 2, None)])
    assert text_of(events(raw)) == "Hello world" and record.moved_from == ["a"]


def test_a_moved_attempt_is_a_sample_of_its_engine_and_no_error() -> None:
    _, record, _, _ = run_moving(
        Slowed(200, [chunk(role=True), chunk("Hel"), chunk("lo")], "text/event-stream"), Planner(move=True)
    )
    settings = settings_for({"a": "http://a.invalid", "b": "http://b.invalid"})
    measurement = Measurement(settings.measurement, settings.backends, None, None)
    measurement.observe(record)
    (sample,) = measurement.recorder.samples("a", "default")
    assert not sample.error and sample.output_tokens == 2 and sample.ttft is not None
    assert measurement.recorder.samples("b", "default") == ()  # the continuation spans two engines


def test_a_stream_the_planner_keeps_finishes_where_it_is() -> None:
    planner = Planner(move=False)
    a = Slowed(200, [chunk(role=True), chunk("Hel"), chunk("lo")], "text/event-stream")
    a.pause = 0.2
    raw, record, backends, _ = run_moving(a, planner)

    assert text_of(events(raw)) == "Hello later" and planner.asked
    assert (record.backend, record.resumed_from, record.moved_from) == ("a", [], [])
    assert {backend for backend, _, _ in backends.sent} == {"a"}


def test_a_stream_is_not_moved_to_an_engine_that_cannot_count_its_tokens() -> None:
    """Continuing a stream needs the destination's /tokenize (proxy/resume.py): llama-cpp-python's server
    ("openai") has none, and a continuation it cannot take would end the stream with an error frame."""
    planner = Planner(move=True)
    a = Slowed(200, [chunk(role=True), chunk("Hel"), chunk("lo")], "text/event-stream")
    a.pause = 0.2
    raw, record, _, _ = run_moving(a, planner, b_flavor="openai")

    assert text_of(events(raw)) == "Hello later" and not planner.asked and record.moved_from == []
