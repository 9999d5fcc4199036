"""Faults through the real gateway over the engine twin: crash, hang, warm-up, 5xx and 4xx storms, a full
queue. Every test is bounded by its own timeouts (the gateway's are 1 s here)."""

from __future__ import annotations

import asyncio

from fault_rig import MODEL, fleet_spec, rig

from gateway.backends.registry import Status


async def test_a_crashed_backend_loses_no_request_the_other_could_serve() -> None:
    # A non-streamed answer's headers come when its generation ends: 400 tokens with 30 running take
    # about 0.8 s here, so the rig's 1 s first-byte limit would turn a slow machine into lost requests.
    # The engines share the gateway's event loop: 30 requests starting at once on a busy machine can hold
    # a loopback connect past the rig's 0.5 s, which reads as both engines failing, and opens b's breaker
    # before a has crashed. A crash refuses connections at once, so the longer limit hides nothing here.
    timeouts = {"connect_s": 5.0, "first_byte_s": 10.0}
    async with rig(fleet_spec("a", "b"), timeouts=timeouts) as r:
        batch = [asyncio.create_task(r.chat(max_tokens=400)) for _ in range(30)]
        await asyncio.sleep(0.1)
        await r.fleet.engine("a").crash()
        answers = await asyncio.gather(*batch)
        after = [await r.chat() for _ in range(5)]
        metrics = await r.metrics()
    assert [a.status for a in answers + after] == [200] * 35
    assert any(a.backend == "b" for a in answers)
    assert 'gateway_upstream_failures_total{backend="a"}' in metrics  # some really failed over


async def test_a_hung_backend_never_hangs_the_client() -> None:
    async with rig(fleet_spec("a", "b")) as r:
        r.fleet.engine("a").hang()
        answers = await asyncio.gather(*(r.chat() for _ in range(6)))
    assert [a.status for a in answers] == [200] * 6
    assert {a.backend for a in answers} == {"b"}
    # first byte timeout (1 s) on the hung one, then served by the other
    assert max(a.seconds for a in answers) < 5.0


async def test_a_backend_hanging_mid_stream_ends_the_stream_with_an_error_frame() -> None:
    async with rig(fleet_spec("a")) as r:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4000}
        async with r.session.post(r.url + "/v1/chat/completions", json={**body, "stream": True}) as resp:
            first = await resp.content.readany()
            r.fleet.engine("a").hang()
            async with asyncio.timeout(5):  # idle timeout is 1 s
                rest = await resp.content.read()
    assert resp.status == 200 and first.startswith(b"data: ")
    assert b"upstream_stream_error" in rest and rest.rstrip().endswith(b"data: [DONE]")


async def test_a_warm_up_longer_than_the_warming_wait_gets_503_backends_warming() -> None:
    spec = fleet_spec("a", warmup_s=3000.0)  # 60 s real at the test's time scale
    async with rig(spec, wait_ready=False, queue={"warming_wait_s": 0.5}) as r:
        await r.wait_status("a", Status.STARTING)
        answer = await r.chat()
        backends = await r.get_json("/gateway/backends")
    assert answer.status == 503 and answer.json()["error"]["code"] == "backends_warming"
    # Nothing learned or declared: vLLM's default warm-up (10 min) less the second it has been loading.
    assert 590 <= int(answer.headers["retry-after"]) <= 600
    assert answer.headers["x-gateway-error-source"] == "gateway"
    assert 0.4 < answer.seconds < 3.0
    assert backends["backends"][0]["status"] == "starting"  # warming, never "dead"


async def test_a_warm_up_shorter_than_the_queue_deadline_waits_and_serves() -> None:
    spec = fleet_spec("a", warmup_s=50.0)  # 1 s real
    async with rig(spec, wait_ready=False, queue={"timeout_s": 10.0}) as r:
        answers = await asyncio.gather(*(r.chat() for _ in range(3)))
    assert [a.status for a in answers] == [200] * 3
    assert min(a.seconds for a in answers) > 0.3  # they waited for the warm-up


async def test_a_5xx_storm_opens_the_breaker_and_moves_traffic() -> None:
    async with rig(fleet_spec("a", "b")) as r:
        r.fleet.engine("a").set_error_rate(1.0)
        answers = [await r.chat() for _ in range(12)]
        backends = {b["name"]: b for b in (await r.get_json("/gateway/backends"))["backends"]}
        metrics = await r.metrics()
    assert [a.status for a in answers] == [200] * 12
    assert {a.backend for a in answers} == {"b"}
    assert backends["a"]["breaker"]["state"] == "open"
    assert backends["b"]["breaker"]["state"] == "closed"
    assert 'gateway_backend_breaker_state{backend="a"} 2.0' in metrics
    # five failures opened it; after that the router no longer tried the failing backend
    assert 'gateway_upstream_failures_total{backend="a"} 5.0' in metrics


async def test_a_4xx_storm_never_opens_the_breaker() -> None:
    async with rig(fleet_spec("a", "b")) as r:
        answers = [await r.chat(max_tokens=0) for _ in range(12)]
        backends = {b["name"]: b for b in (await r.get_json("/gateway/backends"))["backends"]}
        ok = await r.chat()
    assert [a.status for a in answers] == [400] * 12
    assert {a.backend for a in answers} == {"a"}  # passed through at once, never failed over
    assert backends["a"]["breaker"]["state"] == "closed"
    assert backends["a"]["breaker"]["times_opened"] == 0
    assert ok.status == 200 and ok.backend == "a"


async def test_a_full_queue_answers_429_with_retry_after() -> None:
    async with rig(
        fleet_spec("a"),
        concurrency={"a": 1},
        queue={"max_queue": 2, "timeout_s": 10.0},
    ) as r:
        answers = await asyncio.gather(*(r.chat(stream=True, max_tokens=1500) for _ in range(6)))
        waiting = (await r.get_json("/gateway/backends"))["queues"][MODEL]["waiting"]
    statuses = sorted(a.status for a in answers)
    assert statuses == [200, 200, 200, 429, 429, 429]
    refused = [a for a in answers if a.status == 429]
    assert all(a.headers["retry-after"] == "1" for a in refused)
    assert all(a.json()["error"]["code"] == "queue_full" for a in refused)
    assert all(a.stream_ok for a in answers if a.status == 200)
    assert waiting == 0
