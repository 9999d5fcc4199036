"""Dispatch accounting: the one in-flight count per backend (registry, admission and device time read the
same), the device-sharing clock, and the load a request met at dispatch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import orjson
from gateway_fakes import AsgiClient, reliable_dispatcher, settings_for

from gateway.backends.inflight import InFlight
from gateway.backends.registry import Registry
from gateway.proxy.accounting import DeviceTime
from gateway.proxy.dispatch import Dispatcher, Job
from gateway.proxy.reliability import Reliability
from gateway.proxy.upstream import MockResponse, UpstreamConnectError
from gateway.records import RequestRecord

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_device_time_counts_only_the_time_a_neighbour_was_busy() -> None:
    now = [0.0]
    counts = InFlight()
    clock = DeviceTime(counts, {"x": "spark", "y": "spark", "z": None}, clock=lambda: now[0])
    counts.add("x")
    now[0] = 1.0
    counts.add("y")  # from here x shares the device
    now[0] = 3.0
    counts.remove("y")
    now[0] = 4.0
    counts.add("z")  # a backend without a device shares nothing
    # y counts x's time even while idle, from the start (before its first request too: a decode probe of
    # an engine that never had one reads it): only the spans of its own requests and probes are read
    now[0] = 5.0
    shared = [clock.shared_seconds(name) for name in ("x", "y", "z")]
    assert shared == [2.0, 5.0, 0.0]


def test_reading_the_device_clock_changes_none_of_its_totals() -> None:
    """A reader every tenth of a second (the stream mover) gets what a reader at the end alone gets, to
    the last bit: the totals are summed only as counts change, so reads cannot change their rounding."""

    def totals(read_every: float | None) -> tuple[float, float]:
        now = [0.0]
        counts = InFlight()
        clock = DeviceTime(counts, {"x": "spark", "y": "spark"}, clock=lambda: now[0])
        for step in range(1, 200):
            now[0] = step * 0.0731
            if step % 7 == 0:
                (counts.add if step % 14 else counts.remove)("y")
            if step == 3:
                counts.add("x")
            if read_every is not None:
                clock.marks("x")
        marks = clock.marks("x")
        return marks.shared_s, marks.load_s

    assert totals(0.1) == totals(None)


def test_load_seconds_count_the_requests_that_joined_one_sent_alone() -> None:
    now = [0.0]
    counts = InFlight()
    clock = DeviceTime(counts, {"x": None}, clock=lambda: now[0])
    counts.add("x")
    start = clock.marks("x")
    now[0] = 1.0
    for _ in range(3):  # a burst joins it after a second alone
        counts.add("x")
    now[0] = 3.0
    for _ in range(3):
        counts.remove("x")
    now[0] = 4.0
    end = clock.marks("x")
    counts.remove("x")
    # sent at a load of one, it decoded two of its four seconds beside three others: a mean load of 2.5
    assert (end.load_s - start.load_s) / 4.0 == 2.5 and end.shared_s == 0.0


def test_the_count_forgets_idle_backends_and_refuses_to_go_below_zero() -> None:
    counts = InFlight()
    hold = counts.hold("a")
    counts.add("a")
    assert counts["a"] == 2 and counts.busy() == {"a": 2}
    hold.release()
    hold.release()  # a second release gives nothing back
    counts.remove("a")
    assert counts["a"] == 0 and counts.busy() == {}
    try:
        counts.remove("a")
    except ValueError:
        pass
    else:
        raise AssertionError("removing from an idle backend must fail")


def _reliable(
    handler: Any, limit: int | None = 2
) -> tuple[Dispatcher, Registry, Reliability, list[RequestRecord]]:
    backends = [
        {
            "name": name,
            "url": f"http://{name}.invalid",
            "flavor": "vllm",
            "device": "spark",
            "max_concurrency": limit,
        }
        for name in ("a", "b")
    ]
    settings = settings_for({"a": "http://a.invalid", "b": "http://b.invalid"}, backends=backends)
    return reliable_dispatcher(settings, handler)


def _job(ranked: tuple[str, ...], registry: Registry, request_id: str) -> Job:
    return Job(
        request_id,
        "chat",
        "/v1/chat/completions",
        registry.pools[0],
        dict(CHAT),
        orjson.dumps(CHAT),
        time.perf_counter(),
        "default",
        ranked,
    )


async def test_registry_admission_and_dispatch_read_one_count() -> None:
    seen: list[tuple[int, int]] = []
    refs: list[tuple[Registry, Reliability]] = []

    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        registry, reliability = refs[0]
        seen.append((registry.backends["a"].inflight, reliability.admission.inflight("a")))
        return MockResponse(200, [b"{}"])

    dispatcher, registry, reliability, records = _reliable(handler)
    refs.append((registry, reliability))
    slot = reliability.admission.try_acquire(["a"])  # another request holds a slot on a
    assert slot is not None
    assert registry.backends["a"].inflight == 1 and registry.snapshots(registry.pools[0])[0].inflight == 1
    client = AsgiClient()
    await dispatcher.run(_job(("a",), registry, "r1"), client.receive, client.send)
    assert seen == [(2, 2)]  # the held slot and this request, counted once each
    assert records[0].inflight_at_dispatch == 2
    slot.release()
    assert registry.backends["a"].inflight == 0 and reliability.admission.inflight("a") == 0


async def test_a_failover_attempt_counts_on_its_own_backend_and_the_first_is_given_back() -> None:
    seen: list[dict[str, int]] = []
    refs: list[Registry] = []

    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        seen.append(refs[0].inflight.busy())
        if url.startswith("http://a."):
            raise UpstreamConnectError("reset")
        return MockResponse(200, [b"{}"])

    dispatcher, registry, _, records = _reliable(handler)
    refs.append(registry)
    client = AsgiClient()
    await dispatcher.run(_job(("a", "b"), registry, "r1"), client.receive, client.send)
    assert seen == [{"a": 1}, {"b": 1}]
    assert records[0].backend == "b" and registry.inflight.busy() == {}


async def test_two_backends_of_one_device_see_each_others_load_and_shared_time() -> None:
    release_a = asyncio.Event()

    async def handler(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
        if url.startswith("http://a."):
            await release_a.wait()
        else:
            await asyncio.sleep(0.05)
        return MockResponse(200, [b"{}"])

    dispatcher, registry, _, records = _reliable(handler)
    first, second = AsgiClient(), AsgiClient()
    on_a = asyncio.create_task(dispatcher.run(_job(("a",), registry, "on-a"), first.receive, first.send))
    while registry.backends["a"].inflight == 0:
        await asyncio.sleep(0.005)
    await dispatcher.run(_job(("b",), registry, "on-b"), second.receive, second.send)
    release_a.set()
    await on_a
    by_id = {r.request_id: r for r in records}
    assert by_id["on-b"].inflight_at_dispatch == 1 and by_id["on-b"].device_inflight_at_dispatch == 2
    assert by_id["on-b"].device_shared_s >= 0.04  # a was busy all along b's request
    assert by_id["on-a"].device_shared_s >= 0.04 and registry.inflight.busy() == {}
    # b had its backend to itself: a load of one over its attempt (load-seconds = its seconds)
    assert 0.04 <= by_id["on-b"].load_s <= by_id["on-b"].e2e
