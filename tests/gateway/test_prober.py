"""The prober's status rules against fake engines: refused while warming is starting, not dead."""

from __future__ import annotations

import socket

from gateway_fakes import FakeEngine, settings_for

from gateway.backends.prober import Prober
from gateway.backends.registry import Registry, Status
from gateway.settings import ProbeConfig


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


async def probe(registry: Registry, name: str = "a") -> Status:
    prober = Prober(registry, ProbeConfig())  # probed by hand: no background loop
    try:
        return await prober.probe_once(name)
    finally:
        await prober.stop()


def make(url: str, clock: Clock, **extra: object) -> Registry:
    return Registry(settings_for({"a": url}, **extra), clock=clock)


async def test_connection_refused_within_grace_is_starting() -> None:
    clock = Clock()
    registry = make(closed_port_url(), clock)
    assert await probe(registry) is Status.STARTING


async def test_connection_refused_after_the_grace_is_dead() -> None:
    clock = Clock()
    registry = make(closed_port_url(), clock)
    clock.now = 601.0
    assert await probe(registry) is Status.DEAD


async def test_ready_engine_gets_its_capabilities_discovered(engines: list[FakeEngine]) -> None:
    registry = make(engines[0].url, Clock())
    assert await probe(registry) is Status.READY
    assert registry.backends["a"].context_length == 4096
    assert registry.backends["a"].served_models == ("e0",)


async def test_declared_context_wins_over_discovery(engines: list[FakeEngine]) -> None:
    backend = {"name": "a", "url": engines[0].url, "context_length": 1000}
    registry = make(engines[0].url, Clock(), backends=[backend])
    await probe(registry)
    assert registry.backends["a"].context_length == 1000


async def test_engine_that_stops_answering_after_ready_is_dead(engines: list[FakeEngine]) -> None:
    registry = make(engines[0].url, Clock())
    assert await probe(registry) is Status.READY
    await engines[0].stop()
    assert await probe(registry) is Status.DEAD


async def test_llamacpp_loading_is_starting_even_after_having_been_ready(engines: list[FakeEngine]) -> None:
    backend = {"name": "a", "url": engines[0].url, "flavor": "llamacpp"}
    registry = make(engines[0].url, Clock(), backends=[backend])
    assert await probe(registry) is Status.READY
    engines[0].behaviour.health_status = 503
    engines[0].behaviour.health_body = {"error": {"message": "Loading model", "code": 503}}
    assert await probe(registry) is Status.STARTING


async def test_vllm_503_after_ready_is_dead(engines: list[FakeEngine]) -> None:
    registry = make(engines[0].url, Clock())
    await probe(registry)
    engines[0].behaviour.health_status = 503
    assert await probe(registry) is Status.DEAD
