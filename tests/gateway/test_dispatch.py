"""Dispatch: failover before the first byte, 4xx pass-through, streaming, cancel, the completion record."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import orjson
import pytest
from gateway_fakes import AsgiClient, FakeEngine, running_gateway, settings_for

from gateway.backends.registry import Registry, Status
from gateway.backends.warmup import Warmups
from gateway.proxy.dispatch import Dispatcher, DispatchListener, Job
from gateway.proxy.relay import HOLD_MAX_BYTES
from gateway.proxy.reliability import Reliability
from gateway.proxy.upstream import (
    MockResponse,
    MockTransport,
    UpstreamBroken,
    UpstreamConnectError,
    UpstreamTimeout,
)
from gateway.records import ExplorationPlan, RequestRecord
from gateway.stats.measurement import record_sample

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def stream_chat(url: str, body: dict[str, Any]) -> tuple[int, Mapping[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/chat/completions", json={**body, "stream": True}) as response,
    ):
        return response.status, response.headers, await response.read()


def frames(raw: bytes) -> list[bytes]:
    return [f for f in raw.replace(b"\r\n", b"\n").split(b"\n\n") if f]


async def test_stream_strips_the_usage_chunk_it_asked_for(engines: list[FakeEngine]) -> None:
    records: list[RequestRecord] = []
    async with running_gateway(settings_for({"a": engines[0].url}), observers=[records.append]) as (url, _):
        status, headers, raw = await stream_chat(url, CHAT)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert engines[0].bodies[0]["stream_options"] == {"include_usage": True}
    assert not any(b'"usage"' in f for f in frames(raw))
    assert frames(raw)[-1] == b"data: [DONE]"
    assert records[0].output_tokens == 3 and records[0].prompt_tokens == 5


async def test_stream_keeps_the_usage_chunk_the_client_asked_for(engines: list[FakeEngine]) -> None:
    body = {**CHAT, "stream_options": {"include_usage": True}}
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, _):
        _, _, raw = await stream_chat(url, body)
    assert any(b'"usage"' in f for f in frames(raw))


async def test_crlf_stream_with_comments_passes_through(engines: list[FakeEngine]) -> None:
    engines[0].behaviour.crlf = True
    engines[0].behaviour.comments = True
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, _):
        _, _, raw = await stream_chat(url, CHAT)
    assert b": keep-alive\r\n\r\n" in raw
    assert raw.endswith(b"data: [DONE]\r\n\r\n")
    assert b'"usage"' not in raw


async def test_stream_records_ttft_itl_and_tpot(engines: list[FakeEngine]) -> None:
    engines[0].behaviour.tokens = 5
    engines[0].behaviour.gap_s = 0.02
    records: list[RequestRecord] = []
    async with running_gateway(settings_for({"a": engines[0].url}), observers=[records.append]) as (url, _):
        await stream_chat(url, CHAT)
    record = records[0]
    assert record.ttft is not None and record.tpot is not None
    assert len(record.itl) == 4 and all(gap >= 0.015 for gap in record.itl)
    assert record.tpot == pytest.approx((record.e2e - record.ttft) / 4, rel=0.2)


async def test_upstream_error_frame_mid_stream_reaches_the_client(engines: list[FakeEngine]) -> None:
    engines[0].behaviour.error_after = 1
    records: list[RequestRecord] = []
    async with running_gateway(settings_for({"a": engines[0].url}), observers=[records.append]) as (url, _):
        status, _, raw = await stream_chat(url, CHAT)
    assert status == 200
    assert b'"engine failed"' in frames(raw)[-1]
    assert records[0].error == "engine failed"


async def test_connection_drop_mid_stream_becomes_an_error_frame(engines: list[FakeEngine]) -> None:
    engines[0].behaviour.drop_after = 1
    async with running_gateway(settings_for({"a": engines[0].url})) as (url, _):
        status, _, raw = await stream_chat(url, CHAT)
    last = frames(raw)
    assert status == 200
    assert last[-1] == b"data: [DONE]"
    assert orjson.loads(last[-2][len(b"data: ") :])["error"]["code"] == "upstream_stream_error"


async def test_5xx_before_first_byte_fails_over_to_the_next_backend(engines: list[FakeEngine]) -> None:
    engines[0].behaviour.status = 503
    records: list[RequestRecord] = []
    settings = settings_for({"a": engines[0].url, "b": engines[1].url})
    async with running_gateway(settings, observers=[records.append]) as (url, _):
        status, headers, _ = await stream_chat(url, CHAT)
    assert status == 200 and headers["x-gateway-backend"] == "b"
    assert records[0].attempts == 2 and records[0].failures[0][0] == "a"


async def test_connect_error_fails_over_to_the_next_backend(engines: list[FakeEngine]) -> None:
    dead = engines[0].url
    await engines[0].stop()
    settings = settings_for({"a": dead, "b": engines[1].url})
    async with running_gateway(settings, wait_ready=True) as (url, gateway):
        gateway.registry.set_status("a", Status.READY)  # stale readiness: the prober has not seen it die
        gateway.prober.config = gateway.prober.config.model_copy(
            update={"interval_s": 60, "starting_interval_s": 60}
        )
        async with (
            aiohttp.ClientSession() as session,
            session.post(url + "/v1/chat/completions", json=CHAT) as response,
        ):
            assert response.status == 200
            assert response.headers["x-gateway-backend"] == "b"


async def test_4xx_is_passed_on_in_the_gateway_shape_without_failover(engines: list[FakeEngine]) -> None:
    error = {"error": {"message": "context too long", "type": "BadRequestError", "code": 400}}
    engines[0].behaviour.status = 400
    engines[0].behaviour.error_body = error
    settings = settings_for({"a": engines[0].url, "b": engines[1].url})
    async with (
        running_gateway(settings) as (url, _),
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/chat/completions", json=CHAT) as response,
    ):
        assert response.status == 400
        # The engine's message, in the shape of the gateway's own errors.
        assert await response.json() == {
            "error": {
                "message": "context too long",
                "type": "invalid_request_error",
                "param": None,
                "code": "engine_error",
            }
        }
    assert engines[1].bodies == []


async def test_client_disconnect_cancels_the_upstream_request(engines: list[FakeEngine]) -> None:
    engines[0].behaviour.hang = True
    async with (
        running_gateway(settings_for({"a": engines[0].url})) as (url, gateway),
        aiohttp.ClientSession() as session,
    ):
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await session.post(url + "/v1/chat/completions", json=CHAT)
        async with asyncio.timeout(5):
            while engines[0].cancelled == 0:
                await asyncio.sleep(0.02)
        assert gateway.registry.backends["a"].inflight == 0


# Dispatcher alone, over the in-process MockTransport: no sockets.


def _dispatcher(
    handler: Any,
    backends: tuple[str, ...] = ("a", "b"),
    on_dispatch: Sequence[DispatchListener] = (),
    resume: bool = True,
) -> tuple[Dispatcher, Registry, list[RequestRecord]]:
    settings = settings_for({name: f"http://{name}.invalid" for name in backends})
    registry = Registry(settings)
    records: list[RequestRecord] = []
    transport = MockTransport(handler)
    dispatcher = Dispatcher(
        registry,
        transport,
        max_attempts=2,
        observers=[records.append],
        on_dispatch=on_dispatch,
        resume_streams=resume,
    )
    return dispatcher, registry, records


def _job(registry: Registry, ranked: tuple[str, ...] = ("a", "b")) -> Job:
    raw = orjson.dumps(CHAT)
    pool = registry.pools[0]
    return Job("r1", "chat", "/v1/chat/completions", pool, dict(CHAT), raw, 0.0, "default", ranked)


async def test_timeouts_on_every_candidate_end_in_504_naming_each_failure() -> None:
    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        raise UpstreamTimeout(f"{url} too slow")

    dispatcher, registry, records = _dispatcher(handler)
    client = AsgiClient()
    await dispatcher.run(_job(registry), client.receive, client.send)
    assert client.sent[0]["status"] == 504
    assert [b for b, _ in records[0].failures] == ["a", "b"]
    assert all(state.inflight == 0 for state in registry.backends.values())


async def test_retries_are_bounded_by_max_attempts() -> None:
    calls: list[str] = []

    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        calls.append(url)
        raise UpstreamConnectError("refused")

    dispatcher, registry, _ = _dispatcher(handler, ("a", "b", "c"))
    client = AsgiClient()
    await dispatcher.run(_job(registry, ("a", "b", "c")), client.receive, client.send)
    assert len(calls) == 2 and client.sent[0]["status"] == 502


async def test_last_5xx_is_passed_on_when_every_candidate_fails() -> None:
    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        # 503 (unavailable), not 500: the same 500 from two engines is the input's fault (test_blame.py).
        return MockResponse(503, [b'{"error":{"message":"engine dead"}}'])

    dispatcher, registry, _ = _dispatcher(handler)
    client = AsgiClient()
    await dispatcher.run(_job(registry), client.receive, client.send)
    assert client.sent[0]["status"] == 503
    error = orjson.loads(client.sent[1]["body"])["error"]
    assert error["message"] == "engine dead" and error["type"] == "service_unavailable_error"


async def test_inflight_is_counted_from_dispatch_until_the_answer_is_sent() -> None:
    seen: list[int] = []
    dispatcher_ref: list[Registry] = []

    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        seen.append(dispatcher_ref[0].backends["a"].inflight)
        return MockResponse(200, [b'{"usage":{"completion_tokens":2,"prompt_tokens":1}}'])

    dispatcher, registry, records = _dispatcher(handler)
    dispatcher_ref.append(registry)
    client = AsgiClient()
    await dispatcher.run(_job(registry), client.receive, client.send)
    assert seen == [1] and registry.backends["a"].inflight == 0
    assert records[0].inflight_at_dispatch == 1 and records[0].output_tokens == 2


# Waiting for a slot: the queue time is reported apart from the gateway's own time, and a wait for
# warming backends ends as a warm-up, never as a lack of room.

QUEUE_WORDS = ("room", "capacity", "busy", "full")  # a warm-up must never be reported in these terms


def _admitted(
    handler: Any, queue: dict[str, float], **backend: Any
) -> tuple[Dispatcher, Registry, list[RequestRecord]]:
    settings = settings_for(
        {"a": "http://a.invalid"},
        backends=[{"name": "a", "url": "http://a.invalid", "flavor": "vllm", **backend}],
        queue=queue,
    )
    registry = Registry(settings)
    warmups = Warmups(registry, None)
    reliability = Reliability(settings, warmups)
    registry.listeners += [reliability.on_status, warmups.on_status]
    records: list[RequestRecord] = []
    dispatcher = Dispatcher(
        registry, MockTransport(handler), max_attempts=2, observers=[records.append], reliability=reliability
    )
    return dispatcher, registry, records


def _arriving_now(registry: Registry) -> Job:
    raw = orjson.dumps(CHAT)
    return Job(
        "r",
        "chat",
        "/v1/chat/completions",
        registry.pools[0],
        dict(CHAT),
        raw,
        time.perf_counter(),
        "default",
        ("a",),
    )


def _headers(client: AsgiClient) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in client.sent[0]["headers"]}


async def test_the_overhead_header_excludes_the_queue_wait_that_the_queue_header_carries() -> None:
    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        await asyncio.sleep(0.3)  # holds the only slot
        return MockResponse(200, [orjson.dumps({"choices": [], "usage": {"completion_tokens": 1}})])

    dispatcher, registry, records = _admitted(handler, {"timeout_s": 5.0}, max_concurrency=1)
    registry.set_status("a", Status.READY)
    first, second = AsgiClient(), AsgiClient()
    await asyncio.gather(
        dispatcher.run(_arriving_now(registry), first.receive, first.send),
        dispatcher.run(_arriving_now(registry), second.receive, second.send),
    )
    waited = _headers(second)
    assert second.sent[0]["status"] == 200
    assert float(waited["x-gateway-queue-ms"]) >= 250  # it waited for the first to finish
    assert float(waited["x-gateway-overhead-ms"]) < 50  # parse, route, rewrite: not the wait
    assert float(_headers(first)["x-gateway-queue-ms"]) < 50
    assert records[1].queue_wait >= 0.25 and records[1].overhead < 0.05


async def test_a_wait_for_warming_backends_ends_in_503_backends_warming_with_the_time_left() -> None:
    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        raise AssertionError("nothing may be sent to a warming backend")

    queue = {"timeout_s": 5.0, "warming_wait_s": 0.2}
    dispatcher, registry, records = _admitted(handler, queue, warmup_s=1020.0)
    registry.set_status("a", Status.STARTING)
    client = AsgiClient()
    started = time.perf_counter()
    await dispatcher.run(_arriving_now(registry), client.receive, client.send)
    waited = time.perf_counter() - started
    error = orjson.loads(client.sent[1]["body"])["error"]
    headers = _headers(client)
    assert client.sent[0]["status"] == 503 and error["code"] == "backends_warming"
    assert 0.15 < waited < 2.0  # warming_wait_s, not queue.timeout_s
    assert headers["retry-after"] == "1020"  # 1020 s expected, a fraction of a second elapsed: rounded up
    assert "expected ready in ~17 min" in error["message"]
    assert not any(word in error["message"] for word in QUEUE_WORDS)
    assert float(headers["x-gateway-queue-ms"]) >= 150
    assert records[0].status == 503


async def test_a_ready_but_full_pool_still_times_out_as_a_lack_of_room() -> None:
    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        await asyncio.sleep(1.0)
        return MockResponse(200, [b"{}"])

    dispatcher, registry, _ = _admitted(
        handler, {"timeout_s": 0.2, "warming_wait_s": 30.0}, max_concurrency=1
    )
    registry.set_status("a", Status.READY)
    holder, waiter = AsgiClient(), AsgiClient()
    held = asyncio.create_task(dispatcher.run(_arriving_now(registry), holder.receive, holder.send))
    await asyncio.sleep(0.05)
    await dispatcher.run(_arriving_now(registry), waiter.receive, waiter.send)
    await held
    error = orjson.loads(waiter.sent[1]["body"])["error"]
    assert waiter.sent[0]["status"] == 503 and error["code"] == "queue_timeout"
    assert "had room within 0.2s" in error["message"]


# The dispatch hook: called once per request, with the backend of its first attempt sent upstream.


async def test_on_dispatch_is_called_once_with_the_first_backend_even_when_it_fails_over() -> None:
    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        if url.startswith("http://a."):
            raise UpstreamConnectError("refused")
        return MockResponse(200, [b'{"usage":{"completion_tokens":1,"prompt_tokens":1}}'])

    calls: list[tuple[str, str, ExplorationPlan | None]] = []
    dispatcher, registry, records = _dispatcher(
        handler, on_dispatch=[lambda job, backend: calls.append((job.request_id, backend, job.exploration))]
    )
    plan = ExplorationPlan("default", accrued=0.5, backend="a")
    job = _job(registry)
    job.exploration = plan
    client = AsgiClient()
    await dispatcher.run(job, client.receive, client.send)
    assert client.sent[0]["status"] == 200 and records[0].backend == "b"
    assert calls == [("r1", "a", plan)]


async def test_a_failing_on_dispatch_listener_does_not_break_the_request() -> None:
    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        return MockResponse(200, [b"{}"])

    def broken(job: Job, backend: str) -> None:
        raise RuntimeError("listener bug")

    calls: list[str] = []
    dispatcher, registry, records = _dispatcher(
        handler, on_dispatch=[broken, lambda job, backend: calls.append(backend)]
    )
    client = AsgiClient()
    await dispatcher.run(_job(registry), client.receive, client.send)
    assert client.sent[0]["status"] == 200 and records[0].status == 200
    assert calls == ["a"]


async def test_on_dispatch_is_not_called_for_a_request_refused_before_any_attempt() -> None:
    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        raise AssertionError("nothing may be sent to a warming backend")

    dispatcher, registry, _ = _admitted(handler, {"timeout_s": 5.0, "warming_wait_s": 0.05}, warmup_s=60.0)
    calls: list[str] = []
    dispatcher.on_dispatch.append(lambda job, backend: calls.append(backend))
    registry.set_status("a", Status.STARTING)
    client = AsgiClient()
    await dispatcher.run(_arriving_now(registry), client.receive, client.send)
    assert client.sent[0]["status"] == 503
    assert calls == []


# A stream is committed to a backend only once it answered (content, a finish, an error frame, [DONE]):
# the response head and vLLM's empty role frame are held back until then, so a backend that dies before
# its first token is failed over and the client sees one clean stream from the next.

ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
FINISH = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
DONE = b"data: [DONE]\n\n"


def content(text: str) -> bytes:
    return b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}) + b"\n\n"


class Scripted:
    """A streamed 200 from a backend: `chunks`, then `then` raised (the connection broke, a timeout) or,
    with `hang`, no more bytes until the request is cancelled; else a clean end."""

    status = 200
    content_type = "text/event-stream"

    def __init__(self, chunks: Sequence[bytes], then: Exception | None = None, hang: bool = False) -> None:
        self.chunks, self.then, self.hang = chunks, then, hang
        self.closed = False

    async def iter_chunks(self, first_token: Any = None) -> Any:
        for chunk in self.chunks:
            await asyncio.sleep(0)
            yield chunk
        if self.hang:
            await asyncio.sleep(3600)
        if self.then is not None:
            raise self.then

    async def read(self) -> bytes:
        return b"".join(self.chunks)

    def close(self) -> None:
        self.closed = True


def _stream_job(registry: Registry) -> Job:
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    pool = registry.pools[0]
    return Job(
        "r1",
        "chat",
        "/v1/chat/completions",
        pool,
        body,
        orjson.dumps(body),
        0.0,
        "default",
        ("a", "b"),
        stream=True,
    )


def _starts(client: AsgiClient) -> list[dict[str, Any]]:
    return [m for m in client.sent if m["type"] == "http.response.start"]


def _body(client: AsgiClient) -> bytes:
    return b"".join(m.get("body", b"") for m in client.sent if m["type"] == "http.response.body")


def _by_backend(answers: dict[str, Scripted]) -> tuple[Any, list[str]]:
    calls: list[str] = []

    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> Scripted:
        backend = url.removeprefix("http://").split(".")[0]
        calls.append(backend)
        return answers[backend]

    return handler, calls


async def test_a_backend_dying_after_its_role_frame_is_failed_over_to_one_clean_stream() -> None:
    whole = [ROLE, content("Hello"), content(" world"), FINISH, DONE]
    handler, calls = _by_backend(
        {"a": Scripted([ROLE], UpstreamBroken("the backend's response broke off")), "b": Scripted(whole)}
    )
    dispatcher, registry, records = _dispatcher(handler)
    client = AsgiClient()
    await dispatcher.run(_stream_job(registry), client.receive, client.send)
    starts = _starts(client)
    assert len(starts) == 1 and starts[0]["status"] == 200
    assert dict(starts[0]["headers"])[b"x-gateway-backend"] == b"b"
    body = _body(client)
    assert body == b"".join(whole)  # b's stream as it came: one role frame, nothing of a's
    assert body.count(b'"role"') == 1 and b'"error"' not in body
    assert calls == ["a", "b"]
    record = records[0]
    assert record.backend == "b" and record.attempts == 2 and record.error is None
    assert record.failures[0][0] == "a" and "before any content" in record.failures[0][1]
    assert all(state.inflight == 0 for state in registry.backends.values())


async def test_a_stream_ending_before_any_content_is_failed_over() -> None:
    comment = b": keep-alive\n\n"
    handler, calls = _by_backend({"a": Scripted([ROLE, comment]), "b": Scripted([ROLE, content("x"), DONE])})
    dispatcher, registry, records = _dispatcher(handler)
    client = AsgiClient()
    await dispatcher.run(_stream_job(registry), client.receive, client.send)
    assert dict(_starts(client)[0]["headers"])[b"x-gateway-backend"] == b"b"
    assert _body(client) == ROLE + content("x") + DONE and comment not in _body(client)
    assert calls == ["a", "b"] and "ended before any content" in records[0].failures[0][1]


async def test_a_first_token_timeout_after_the_role_frame_fails_over_then_ends_in_a_504() -> None:
    timeout = UpstreamTimeout("no first token from the backend within the first-token timeout")
    handler, calls = _by_backend({"a": Scripted([ROLE], timeout), "b": Scripted([ROLE], timeout)})
    dispatcher, registry, records = _dispatcher(handler)
    client = AsgiClient()
    await dispatcher.run(_stream_job(registry), client.receive, client.send)
    assert calls == ["a", "b"]
    assert [m["status"] for m in _starts(client)] == [504]  # one clean answer: no 200 was ever sent
    assert b"first-token timeout" in _body(client) and b'"role"' not in _body(client)
    assert records[0].status == 504


async def test_an_error_frame_blaming_the_engine_before_content_is_failed_over() -> None:
    dead = b'data: {"error":{"message":"EngineCore died","type":"InternalServerError","code":500}}\n\n'
    handler, calls = _by_backend(
        {"a": Scripted([ROLE, dead, DONE]), "b": Scripted([ROLE, content("x"), DONE])}
    )
    dispatcher, registry, records = _dispatcher(handler)
    client = AsgiClient()
    await dispatcher.run(_stream_job(registry), client.receive, client.send)
    assert calls == ["a", "b"] and _body(client) == ROLE + content("x") + DONE
    assert records[0].error is None and "EngineCore died" in records[0].failures[0][1]


async def test_an_error_frame_blaming_the_request_is_passed_on_without_failover() -> None:
    bad = b'data: {"error":{"message":"invalid tool schema","type":"BadRequestError","code":400}}\n\n'
    handler, calls = _by_backend(
        {"a": Scripted([ROLE, bad, DONE]), "b": Scripted([ROLE, content("x"), DONE])}
    )
    dispatcher, registry, records = _dispatcher(handler)
    client = AsgiClient()
    await dispatcher.run(_stream_job(registry), client.receive, client.send)
    # Passed on in the gateway's error shape, the engine's message kept.
    reshaped = b'data: {"error":{"message":"invalid tool schema","type":"invalid_request_error",'
    reshaped += b'"param":null,"code":"engine_error"}}\n\n'
    assert calls == ["a"] and _body(client) == ROLE + reshaped + DONE
    assert records[0].error == "invalid tool schema"


async def test_after_content_a_break_ends_the_stream_with_an_error_frame_and_done_without_resuming() -> None:
    broken = UpstreamBroken("the backend's response broke off")
    handler, calls = _by_backend(
        {"a": Scripted([ROLE, content("Hel")], broken), "b": Scripted([ROLE, content("x"), DONE])}
    )
    dispatcher, registry, records = _dispatcher(handler, resume=False)
    client = AsgiClient()
    await dispatcher.run(_stream_job(registry), client.receive, client.send)
    assert calls == ["a"]  # content was sent: it cannot be replayed elsewhere, nor continued (off)
    assert dict(_starts(client)[0]["headers"])[b"x-gateway-backend"] == b"a"
    parts = frames(_body(client))
    assert parts[:2] == [ROLE.strip(), content("Hel").strip()]
    assert orjson.loads(parts[-2][len(b"data: ") :])["error"]["code"] == "upstream_stream_error"
    assert parts[-1] == b"data: [DONE]" and client.sent[-1]["more_body"] is False
    assert records[0].error is not None and records[0].attempts == 1


async def test_what_is_held_before_content_is_bounded_in_bytes() -> None:
    comments = [b": " + b"x" * 1000 + b"\n\n"] * 80  # 80 KB without a token, past HOLD_MAX_BYTES
    broken = UpstreamBroken("the backend's response broke off")
    handler, calls = _by_backend({"a": Scripted([ROLE, *comments], broken), "b": Scripted([ROLE, DONE])})
    dispatcher, registry, _ = _dispatcher(handler)
    client = AsgiClient()
    await dispatcher.run(_stream_job(registry), client.receive, client.send)
    # Past the bound the stream was forwarded as it came: committed to a, so its break is an error frame.
    assert calls == ["a"] and _starts(client)[0]["status"] == 200
    assert b"upstream_stream_error" in _body(client) and _body(client).endswith(DONE)
    held = client.sent[1]["body"]
    assert HOLD_MAX_BYTES < len(held) <= HOLD_MAX_BYTES + len(comments[0])


# The gateway ending exchanges (the drain deadline): each answers for itself, no exception escapes.

WHY = "the gateway is shutting down and its drain deadline (5s) has passed"


async def test_end_all_ends_a_stream_under_way_with_an_error_frame_and_done(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handler, _ = _by_backend({"a": Scripted([ROLE, content("Hel")], hang=True)})
    dispatcher, registry, records = _dispatcher(handler, ("a",))
    client = AsgiClient()
    job = _stream_job(registry)
    job.ranked = ("a",)
    run = asyncio.create_task(dispatcher.run(job, client.receive, client.send))
    async with asyncio.timeout(5):
        while b"Hel" not in _body(client):
            await asyncio.sleep(0.01)
    assert dispatcher.end_all(WHY) == 1
    async with asyncio.timeout(5):
        record = await run  # returns: no CancelledError, no other exception
    parts = frames(_body(client))
    error = orjson.loads(parts[-2][len(b"data: ") :])["error"]
    assert error["code"] == "shutting_down" and error["message"] == WHY
    assert parts[-1] == b"data: [DONE]" and client.sent[-1]["more_body"] is False
    assert records == [record] and record.error == WHY and record.status == 200
    assert record.ended_by_gateway and record_sample(record) is None  # no error sample against "a"
    assert registry.backends["a"].inflight == 0 and dispatcher.live == set()
    ended = [r for r in caplog.records if WHY in r.getMessage()]
    assert len(ended) == 1 and ended[0].exc_info is None
    assert dispatcher.end_all(WHY) == 0  # nothing left in flight


async def test_end_all_answers_503_to_a_request_with_nothing_sent_yet() -> None:
    handler, _ = _by_backend({"a": Scripted([ROLE], hang=True)})  # held: no content yet
    dispatcher, registry, records = _dispatcher(handler, ("a",))
    client = AsgiClient()
    job = _stream_job(registry)
    job.ranked = ("a",)
    run = asyncio.create_task(dispatcher.run(job, client.receive, client.send))
    async with asyncio.timeout(5):
        while registry.backends["a"].inflight == 0:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
    assert dispatcher.end_all(WHY) == 1
    async with asyncio.timeout(5):
        await run
    assert [m["status"] for m in _starts(client)] == [503]
    assert orjson.loads(_body(client))["error"]["code"] == "shutting_down"
    assert records[0].status == 503 and records[0].error == WHY
