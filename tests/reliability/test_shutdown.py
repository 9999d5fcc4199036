"""Graceful shutdown: refuse new requests with 503 + Retry-After, wait for in-flight ones to a deadline."""

from __future__ import annotations

import asyncio
from typing import Any

from reliability_asgi import call, echo_app

from gateway.shutdown import DrainGuard, DrainTracker, drain_then

BOUND = 5.0


def slow_app(release: asyncio.Event) -> Any:
    """Answers only once `release` is set, like a long stream."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await release.wait()
        await send({"type": "http.response.body", "body": b"done"})

    return app


async def test_requests_are_counted_while_they_run() -> None:
    tracker = DrainTracker()
    release = asyncio.Event()
    request = asyncio.create_task(call(DrainGuard(slow_app(release), tracker)))
    await asyncio.sleep(0.01)
    assert tracker.inflight == 1
    release.set()
    await asyncio.wait_for(request, BOUND)
    assert tracker.inflight == 0


async def test_a_draining_gateway_refuses_new_requests_with_503_and_retry_after() -> None:
    tracker = DrainTracker()
    tracker.begin_drain()
    response, _ = await call(DrainGuard(echo_app(), tracker, retry_after_seconds=7))
    assert response.status == 503
    assert response.headers["retry-after"] == "7"
    assert response.json()["error"]["code"] == "shutting_down"


async def test_liveness_and_metrics_stay_served_while_draining() -> None:
    tracker = DrainTracker()
    tracker.begin_drain()
    for path in ("/health", "/metrics"):
        response, _ = await call(DrainGuard(echo_app(), tracker), path=path, method="GET")
        assert response.status == 200


async def test_drain_waits_for_in_flight_streams_to_finish() -> None:
    tracker = DrainTracker()
    release = asyncio.Event()
    stream = asyncio.create_task(call(DrainGuard(slow_app(release), tracker)))
    await asyncio.sleep(0.01)
    drain = asyncio.create_task(tracker.drain(timeout=BOUND))
    await asyncio.sleep(0.05)
    assert not drain.done(), "drain must wait for the stream"
    release.set()
    result = await asyncio.wait_for(drain, BOUND)
    assert result.drained and result.remaining == 0
    response, _ = await stream
    assert response.body == b"done"


async def test_drain_gives_up_at_the_deadline_and_reports_what_was_cut_off() -> None:
    tracker = DrainTracker()
    release = asyncio.Event()
    stream = asyncio.create_task(call(DrainGuard(slow_app(release), tracker)))
    await asyncio.sleep(0.01)
    closed: list[bool] = []
    result = await asyncio.wait_for(drain_then(tracker, 0.05, lambda: closed.append(True)), BOUND)
    assert not result.drained and result.remaining == 1
    assert 0.04 <= result.waited_seconds < 1.0
    assert closed == [True]
    release.set()
    await asyncio.wait_for(stream, BOUND)


async def test_an_idle_gateway_drains_at_once() -> None:
    result = await asyncio.wait_for(DrainTracker().drain(timeout=BOUND), BOUND)
    assert result.drained and result.waited_seconds < 0.5


async def test_at_the_deadline_the_requests_left_are_told_to_end_and_given_time_to_do_so() -> None:
    tracker = DrainTracker()
    release = asyncio.Event()
    told: list[str] = []

    def end_inflight(why: str) -> int:
        told.append(why)
        release.set()  # like the dispatcher's end_all: each stream writes its last frame and returns
        return 1

    tracker.end_inflight = end_inflight
    stream = asyncio.create_task(call(DrainGuard(slow_app(release), tracker)))
    await asyncio.sleep(0.01)
    closed: list[int] = []
    result = await asyncio.wait_for(drain_then(tracker, 0.05, lambda: closed.append(tracker.inflight)), BOUND)
    assert len(told) == 1 and "drain deadline (0.05s)" in told[0]
    assert not result.drained and result.remaining == 1 and result.ended == 1
    assert closed == [0]  # the close came only once the ended request had finished
    response, _ = await asyncio.wait_for(stream, BOUND)
    assert response.body == b"done"


async def test_nothing_is_ended_when_everything_finished_in_time() -> None:
    told: list[str] = []
    tracker = DrainTracker(end_inflight=lambda why: told.append(why) or 0)
    result = await asyncio.wait_for(tracker.drain(timeout=0.05), BOUND)
    assert result.drained and result.ended == 0 and told == []
