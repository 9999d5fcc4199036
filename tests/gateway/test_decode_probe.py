"""Decode probes: a short streamed completion to one engine, timed and recorded as a sample of its own."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping

import pytest

from gateway.proxy.decode_probe import (
    MAX_IN_FLIGHT,
    PROBE_PROFILE,
    PROBE_PROMPT,
    PROBE_TOKENS,
    DecodeProbes,
    ProbeTarget,
)
from gateway.proxy.upstream import MockResponse, MockTransport, UpstreamBroken
from gateway.records import Sample


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def frame(event: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def text(token: str) -> bytes:
    return frame({"choices": [{"index": 0, "text": token, "finish_reason": None}]})


def stream(clock: Clock, usage: bool = True) -> Iterator[bytes]:
    """An engine's stream: a role-less empty frame, 0.5 s to the first text, then 31 more tokens 0.1 s
    apart (two per chunk, as a speculative engine sends them), the usage frame and [DONE]; the clock moves
    as each chunk is read."""
    clock.t += 0.2
    yield frame({"choices": [{"index": 0, "text": "", "finish_reason": None}]})
    clock.t += 0.3
    yield text(" one")
    for _ in range(15):
        clock.t += 0.2
        yield text(" two,") + text(" three")[:10]  # a frame split across two reads
        yield text(" three")[10:]
    clock.t += 0.1
    yield text(" four")
    if usage:
        yield frame({"choices": [], "usage": {"prompt_tokens": 14, "completion_tokens": PROBE_TOKENS}})
    yield b"data: [DONE]\n\n"


class Engine:
    """Answers probes like a vLLM server; remembers what it was sent."""

    def __init__(self, clock: Clock, status: int = 200, usage: bool = True) -> None:
        self.clock, self.status, self.usage = clock, status, usage
        self.sent: list[tuple[str, Mapping[str, str], dict[str, object]]] = []
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        self.sent.append((url, headers, json.loads(body)))
        await self.release.wait()
        return MockResponse(status=self.status, chunks=stream(self.clock, self.usage))


def probes_for(engine: Engine, recorded: list[tuple[str, str, Sample]], busy: bool = True) -> DecodeProbes:
    target = ProbeTarget("http://b:8000", "Qwen/Qwen3.6-35B-A3B-FP8", {"authorization": "Bearer k"})
    return DecodeProbes(
        MockTransport(engine),
        {"base": target},
        lambda backend, profile, sample: recorded.append((backend, profile, sample)),
        inflight=lambda backend: 3,
        # a neighbour busy the whole time (its device time runs with the clock), or never
        shared_seconds=lambda backend: engine.clock.t if busy else 0.0,
        clock=engine.clock,
    )


async def settle(probes: DecodeProbes) -> None:
    for _ in range(20):
        await asyncio.sleep(0)
    await probes.stop()


async def test_a_probe_is_timed_from_its_stream_and_recorded_under_its_own_profile() -> None:
    clock, recorded = Clock(), []
    engine = Engine(clock)
    probes = probes_for(engine, recorded)
    probes.send("base")
    await settle(probes)
    url, headers, body = engine.sent[0]
    assert url == "http://b:8000/v1/completions" and headers["authorization"] == "Bearer k"
    assert body["model"] == "Qwen/Qwen3.6-35B-A3B-FP8" and body["max_tokens"] == PROBE_TOKENS
    assert body["ignore_eos"] is True and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    [(backend, profile, sample)] = recorded
    assert (backend, profile) == ("base", PROBE_PROFILE)
    assert sample.ttft == pytest.approx(0.5) and sample.e2e == pytest.approx(3.6)
    assert sample.output_tokens == PROBE_TOKENS and sample.prompt_tokens == 14
    assert sample.tpot == pytest.approx(3.1 / (PROBE_TOKENS - 1))
    # the load a request sent there now would meet (3 in flight, itself included), a busy neighbour
    assert sample.concurrency == 4 and sample.device_share == 1.0 and sample.repetition == 0.0


async def test_probes_sent_together_are_each_other_s_load() -> None:
    clock, recorded = Clock(), []
    probes = probes_for(Engine(clock), recorded)
    for _ in range(3):
        probes.send("base")
    await settle(probes)
    # 3 client requests in flight and the 3 probes: each probe decoded in a batch of 6
    assert [sample.concurrency for _, _, sample in recorded] == [6, 6, 6]


async def test_without_usage_the_chunks_with_text_are_counted() -> None:
    clock, recorded = Clock(), []
    probes = probes_for(Engine(clock, usage=False), recorded, busy=False)
    probes.send("base")
    await settle(probes)
    [(_, _, sample)] = recorded
    assert sample.output_tokens == 1 + 15 * 2 + 1 and sample.device_share == 0.0


async def test_a_probe_s_device_share_is_the_part_of_its_life_a_neighbour_was_busy() -> None:
    clock, recorded = Clock(), []
    engine = Engine(clock)
    probes = DecodeProbes(
        MockTransport(engine),
        {"base": ProbeTarget("http://b:8000", "m")},
        lambda backend, profile, sample: recorded.append((backend, profile, sample)),
        inflight=lambda backend: 0,
        shared_seconds=lambda backend: max(0.0, clock.t - 101.0),  # a neighbour busy from 1 s in
        clock=clock,
    )
    probes.send("base")
    await settle(probes)
    [(_, _, sample)] = recorded
    assert sample.device_share == pytest.approx((3.6 - 1.0) / 3.6)


@pytest.mark.parametrize("status", [500, 503])
async def test_a_failed_probe_records_nothing(status: int) -> None:
    clock, recorded = Clock(), []
    probes = probes_for(Engine(clock, status=status), recorded)
    probes.send("base")
    await settle(probes)
    assert recorded == [] and probes.sent == 1


async def test_a_broken_probe_records_nothing_and_an_unknown_backend_is_not_probed() -> None:
    clock, recorded = Clock(), []

    async def broken(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        raise UpstreamBroken("the backend's response broke off")

    probes = probes_for(Engine(clock), recorded)
    probes.transport = MockTransport(broken)
    probes.send("base")
    probes.send("nowhere")
    await settle(probes)
    assert recorded == [] and probes.sent == 1


async def test_probes_of_one_backend_in_flight_are_bounded() -> None:
    clock, recorded = Clock(), []
    engine = Engine(clock)
    engine.release.clear()  # every probe waits for its answer
    probes = probes_for(engine, recorded)
    for _ in range(MAX_IN_FLIGHT + 5):
        probes.send("base")
    for _ in range(5):
        await asyncio.sleep(0)
    assert probes.sent == MAX_IN_FLIGHT and len(engine.sent) == MAX_IN_FLIGHT
    engine.release.set()
    await settle(probes)
    assert len(recorded) == MAX_IN_FLIGHT
    probes.send("base")  # room again once they are done
    await settle(probes)
    assert probes.sent == MAX_IN_FLIGHT + 1


async def test_a_backend_that_serves_chat_only_is_probed_through_chat_completions() -> None:
    clock, recorded = Clock(), []
    sent: list[tuple[str, dict[str, object]]] = []

    def delta(token: str) -> bytes:
        return frame({"choices": [{"index": 0, "delta": {"content": token}, "finish_reason": None}]})

    def chat_stream() -> Iterator[bytes]:
        yield frame({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        clock.t += 0.4
        for _ in range(PROBE_TOKENS):
            yield delta(" one")
            clock.t += 0.1
        yield b"data: [DONE]\n\n"

    async def engine(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        sent.append((url, json.loads(body)))
        return MockResponse(chunks=chat_stream())

    target = ProbeTarget("http://b:8000", "m", chat=True)
    probes = DecodeProbes(
        MockTransport(engine),
        {"base": target},
        lambda backend, profile, sample: recorded.append((backend, profile, sample)),
        inflight=lambda backend: 0,
        shared_seconds=lambda backend: 0.0,
        clock=clock,
    )
    probes.send("base")
    await settle(probes)
    [(url, body)] = sent
    assert url == "http://b:8000/v1/chat/completions" and "prompt" not in body
    assert body["messages"] == [{"role": "user", "content": PROBE_PROMPT}]
    [(_, _, sample)] = recorded
    assert sample.output_tokens == PROBE_TOKENS and sample.ttft == pytest.approx(0.4)
