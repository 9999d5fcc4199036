"""Routing knows the cost of a start (engines/on_demand.py, engines/start_cost.py): with a backend of the
model ready, a stopped engine is started only when waiting for it wins for the request, and explain says
which way it went and why. A real policy router, a stand-in Docker API (tests/engines/test_on_demand.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.backends.registry import Registry, Status
from gateway.engines.engine import Phase
from gateway.engines.manager import EngineManager
from gateway.engines.on_demand import StartOnDemand
from gateway.engines.start_cost import queue_wait_s
from gateway.policy.load import parse_policy
from gateway.records import BackendSnapshot, RequestRecord
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter
from gateway.settings import Settings
from tests.engines.test_on_demand import _manager

POLICY = """
version: 1
profiles:
  - name: default
"""
SMALL_CONTEXT = 4096


def _gateway() -> tuple[StartOnDemand, EngineManager, Registry]:
    backends = [{"name": "static", "url": "http://127.0.0.1:1", "max_concurrency": 2}]
    engine = {"name": "e", "model": "m", "image": "img", "port": 9, "memory_gib": 10, "warmup_s": 30.0}
    settings = Settings(engines=[engine], backends=backends, pools=[{"model": "m", "backends": ["static"]}])
    manager, registry = _manager(settings)
    router = StartOnDemand(PolicyRouter(FixedPolicy(parse_policy(POLICY))), manager)
    return router, manager, registry


def _candidates(registry: Registry, **static: Any) -> list[BackendSnapshot]:
    pool = registry.pool("m")
    assert pool is not None
    snaps = registry.snapshots(pool)
    # The running backend is small (its context as its probe would have read it), the engine large.
    return [
        replace(s, context_length=SMALL_CONTEXT, **static)
        if s.name == "static"
        else replace(s, context_length=131072)
        for s in snaps
    ]


def _body(words: int) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "word " * words}], "max_tokens": 16}


async def test_a_request_the_running_backend_cannot_hold_starts_the_engine_and_waits_for_it() -> None:
    router, manager, registry = _gateway()
    await manager.start()
    try:
        registry.set_status("static", Status.READY)
        body = _body(20000)  # far beyond 4096 tokens
        explained = router.explain("chat", body, _candidates(registry))["engine_start"]
        assert explained["start"] == "e" and explained["why"].startswith("start chosen")
        assert "context" in explained["why"]
        assert manager.engines["e"].phase is Phase.STOPPED  # explain starts nothing
        decision = router.route("chat", body, _candidates(registry))
        assert manager.engines["e"].phase is Phase.STARTING
        assert decision.ranked == () and decision.fallback == ("e",)  # the request waits for the start
        assert await manager.engines["e"].op  # type: ignore[misc]
    finally:
        await manager.stop()


async def test_a_request_the_running_backend_serves_does_not_start_the_engine() -> None:
    router, manager, registry = _gateway()
    await manager.start()
    try:
        registry.set_status("static", Status.READY)
        body = _body(10)
        explained = router.explain("chat", body, _candidates(registry))["engine_start"]
        assert explained["start"] is None and explained["why"].startswith("start declined: static serves now")
        decision = router.route("chat", body, _candidates(registry))
        assert decision.ranked == ("static",)
        assert manager.engines["e"].phase is Phase.STOPPED
    finally:
        await manager.stop()


def _answered(backend: str, seconds: float) -> RequestRecord:
    return RequestRecord("id", "m", "chat", "default", False, backend=backend, status=200, e2e=seconds)


async def test_a_queue_longer_than_the_start_starts_the_engine_and_a_short_one_does_not() -> None:
    router, manager, registry = _gateway()
    await manager.start()
    try:
        registry.set_status("static", Status.READY)
        manager.observe(_answered("static", 20.0))  # 20 s per request on 2 slots
        body = _body(10)
        short = router.explain("chat", body, _candidates(registry, inflight=2))["engine_start"]
        assert short["start"] is None  # one request ahead: ~10 s, shorter than the 30 s start
        long = router.explain("chat", body, _candidates(registry, inflight=6))["engine_start"]
        assert long["start"] == "e" and "queue would take ~50s" in long["why"]
        router.route("chat", body, _candidates(registry, inflight=6))
        assert manager.engines["e"].phase is Phase.STARTING
        assert await manager.engines["e"].op  # type: ignore[misc]
    finally:
        await manager.stop()


def test_queue_wait_counts_the_requests_ahead_beyond_the_concurrency() -> None:
    idle = BackendSnapshot("b", inflight=1, max_concurrency=4)
    assert queue_wait_s(idle, None) == 0.0  # a free slot: no wait, whatever a request takes
    full = replace(idle, inflight=7, engine_waiting=2.0)
    assert queue_wait_s(full, None) is None
    assert queue_wait_s(full, 8.0) == (7 + 1 - 4 + 2) * 8.0 / 4


async def test_the_expected_cold_start_is_the_median_of_the_last_ones_and_shrinks_while_starting() -> None:
    router, manager, registry = _gateway()
    await manager.start()
    try:
        engine = manager.engines["e"]
        assert manager.warmup_left_s("e") == 30.0  # configured, none measured yet
        engine.cold_starts.extend([40.0, 400.0, 50.0])
        assert manager.warmup_left_s("e") == 50.0  # one odd start does not count
        engine.phase, engine.measure_from = Phase.STARTING, registry.clock() - 20.0
        assert 29.0 <= manager.warmup_left_s("e") <= 30.0
    finally:
        engine.phase = Phase.STOPPED
        await manager.stop()
