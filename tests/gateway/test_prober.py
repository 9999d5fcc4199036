"""The prober's status rules against fake engines: refused while warming is starting, not dead."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Mapping

import pytest
from gateway_fakes import FakeEngine, settings_for

from gateway.backends.prober import Prober
from gateway.backends.registry import Registry, Status
from gateway.proxy.upstream import AiohttpTransport
from gateway.settings import ProbeConfig, Timeouts


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
    # Through the production transport's control-plane GET, over loopback sockets to the fake engines.
    transport = AiohttpTransport(Timeouts())
    prober = Prober(registry, ProbeConfig(), transport.get)  # probed by hand: no background loop
    try:
        return await prober.probe_once(name)
    finally:
        await prober.stop()
        await transport.aclose()


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


class ScriptedFetch:
    """A fetch without sockets: answers /health with `health`, /v1/models with one model card; `error`,
    when set, is raised instead. Every call is kept as (url, headers, timeout_s)."""

    def __init__(self) -> None:
        self.health: tuple[int, bytes] = (200, b'{"status":"ok"}')
        self.error: OSError | None = None
        self.calls: list[tuple[str, dict[str, str], float]] = []

    async def __call__(self, url: str, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
        self.calls.append((url, dict(headers), timeout_s))
        if self.error is not None:
            raise self.error
        if url.endswith("/v1/models"):
            return 200, b'{"object":"list","data":[{"id":"served","max_model_len":2048}]}'
        return self.health if url.endswith("/health") else (404, b"")


async def test_probes_go_through_the_injected_fetch_with_the_key_and_the_probe_timeout() -> None:
    fetch = ScriptedFetch()
    backend = {"name": "a", "url": "http://engine:8000", "flavor": "vllm", "api_key": "sk-engine"}
    registry = make("http://engine:8000", Clock(), backends=[backend])
    prober = Prober(registry, ProbeConfig(timeout_s=2.5), fetch)
    assert await prober.probe_once("a") is Status.READY
    assert fetch.calls[0] == ("http://engine:8000/health", {"Authorization": "Bearer sk-engine"}, 2.5)
    assert registry.backends["a"].served_models == ("served",)  # discovery used the same fetch


async def test_a_timed_out_probe_is_not_a_refused_one() -> None:
    fetch = ScriptedFetch()
    registry = make("http://engine:8000", Clock())
    prober = Prober(registry, ProbeConfig(timeouts_to_dead=2), fetch)
    assert await prober.probe_once("a") is Status.READY
    fetch.error = TimeoutError()
    assert await prober.probe_once("a") is Status.READY  # one slow probe proves nothing
    assert prober.timeouts_in_a_row("a") == 1
    fetch.error = ConnectionRefusedError()
    assert await prober.probe_once("a") is Status.DEAD  # nothing listens: proof at once
    assert prober.timeouts_in_a_row("a") == 0


async def test_llamacpp_string_error_503_loading_is_starting_and_failing_after_ready_is_dead(
    engines: list[FakeEngine],
) -> None:
    backend = {"name": "a", "url": engines[0].url, "flavor": "llamacpp"}
    registry = make(engines[0].url, Clock(), backends=[backend])
    assert await probe(registry) is Status.READY
    engines[0].behaviour.health_status = 503
    engines[0].behaviour.health_body = {"error": "Loading model"}
    assert await probe(registry) is Status.STARTING  # a restart loading its model again
    engines[0].behaviour.health_body = {"error": "Service Unavailable"}
    assert await probe(registry) is Status.DEAD


class Flaky:
    """A fetch that answers like a ready engine unless `error` is set, which it then raises (any
    exception, not only what a transport is documented to raise)."""

    def __init__(self) -> None:
        self.error: Exception | None = None
        self.health: tuple[int, bytes] = (200, b'{"status":"ok"}')
        self.calls = 0

    async def __call__(self, url: str, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        if url.endswith("/v1/models"):
            return 200, b'{"object":"list","data":[{"id":"served"}]}'
        return self.health if url.endswith("/health") else (404, b"")


async def wait_for(condition: Callable[[], object], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


FAST = ProbeConfig(interval_s=0.01, starting_interval_s=0.01)


async def test_an_unexpected_probe_error_keeps_the_loop_alive_and_the_backend_truthful(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.prober")
    fetch = Flaky()
    registry = make("http://engine:8000", Clock())
    prober = Prober(registry, FAST, fetch)
    state = registry.backends["a"]
    await prober.start()
    try:
        await wait_for(lambda: state.status is Status.READY)
        fetch.error = RuntimeError("a transport bug")
        await wait_for(lambda: state.status is Status.DEAD)  # a serving backend that cannot be probed
        calls = fetch.calls
        await wait_for(lambda: fetch.calls >= calls + 5)  # still probing, every interval
        assert state.status is Status.DEAD and state.detail == "probe failed: RuntimeError"
        fetch.error = None  # the engine answers again (a restart, a fixed network)
        await wait_for(lambda: state.status is Status.READY)
    finally:
        await prober.stop()
    failed = [r for r in caplog.records if r.levelno == logging.ERROR and "a transport bug" in r.getMessage()]
    assert len(failed) == 1, "logged once, not once per probe"
    assert any("works again" in r.getMessage() for r in caplog.records)


async def test_a_llamacpp_string_error_no_longer_kills_the_loop_after_a_crash_and_restart() -> None:
    fetch = Flaky()
    backend = {"name": "a", "url": "http://engine:8080", "flavor": "llamacpp"}
    registry = make("http://engine:8080", Clock(), backends=[backend])
    prober = Prober(registry, FAST, fetch)
    state = registry.backends["a"]
    await prober.start()
    try:
        await wait_for(lambda: state.status is Status.READY)
        fetch.health = (503, b'{"error":"Service Unavailable"}')  # crashed behind a proxy
        await wait_for(lambda: state.status is Status.DEAD)
        fetch.health = (503, b'{"error":"Loading model"}')  # restarting
        await wait_for(lambda: state.status is Status.STARTING)
        fetch.health = (200, b'{"status":"ok"}')
        await wait_for(lambda: state.status is Status.READY)
    finally:
        await prober.stop()


async def test_a_never_probed_backend_whose_probe_raises_is_not_left_unknown() -> None:
    fetch = Flaky()
    fetch.error = ValueError("Cannot combine AUTHORIZATION header with AUTH argument")
    registry = make("http://engine:8000", Clock())
    prober = Prober(registry, FAST, fetch)
    await prober.start()
    try:
        await wait_for(lambda: registry.backends["a"].status is not Status.UNKNOWN)
    finally:
        await prober.stop()
    assert registry.backends["a"].status is Status.STARTING  # within the startup grace, like no answer


async def test_refusals_past_the_warmup_bound_are_unreachable_naming_host_and_port(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, url = Clock(), closed_port_url()
    registry = make(url, clock)
    transport = AiohttpTransport(Timeouts())
    prober = Prober(registry, ProbeConfig(), transport.get, warmup_bound=lambda name: 5.0)
    where = url.removeprefix("http://")
    try:
        with caplog.at_level(logging.INFO, logger="gateway.prober"):
            assert await prober.probe_once("a") is Status.STARTING  # may be an engine loading
            assert f"connection refused at {where}" in registry.backends["a"].detail  # said at once
            clock.now = 4.5
            assert await prober.probe_once("a") is Status.STARTING
            clock.now = 6.0
            assert await prober.probe_once("a") is Status.UNREACHABLE
    finally:
        await transport.aclose()
    assert f"nothing listens at {where}" in registry.backends["a"].detail
    assert not registry.may_come_back("a")  # requests are not held for it
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "unreachable" in warned[0].getMessage() and where in warned[0].getMessage()


async def test_a_backend_whose_engine_the_gateway_runs_is_never_called_unreachable() -> None:
    """Engines on demand: nothing listening at a stopped engine's port is the engine stopped, which a
    request starts; called unreachable, it refused that request at once (a container removed by hand)."""
    clock, url = Clock(), closed_port_url()
    registry = make(url, clock)
    transport = AiohttpTransport(Timeouts())
    prober = Prober(registry, ProbeConfig(), transport.get, warmup_bound=lambda name: 5.0)
    prober.managed = lambda name: name == "a"
    try:
        assert await prober.probe_once("a") is Status.STARTING
        clock.now = 6.0  # past the warm-up bound: an unmanaged backend is unreachable here (above)
        assert await prober.probe_once("a") is Status.STARTING  # within the startup grace, as ever
    finally:
        await transport.aclose()
    assert "connection refused" in registry.backends["a"].detail


async def test_an_unreachable_backend_that_answers_is_ready_again() -> None:
    fetch, clock = ScriptedFetch(), Clock()
    registry = make("http://engine:8000", clock)
    prober = Prober(registry, ProbeConfig(), fetch, warmup_bound=lambda name: 1.0)
    fetch.error = ConnectionRefusedError()
    await prober.probe_once("a")
    clock.now = 2.0
    assert await prober.probe_once("a") is Status.UNREACHABLE
    fetch.error = None
    assert await prober.probe_once("a") is Status.READY


async def test_a_reset_connection_is_no_proof_that_nothing_listens() -> None:
    fetch, clock = ScriptedFetch(), Clock()
    registry = make("http://engine:8000", clock)
    prober = Prober(registry, ProbeConfig(), fetch, warmup_bound=lambda name: 1.0)
    fetch.error = ConnectionResetError()
    for clock.now in (0.0, 5.0, 10.0):
        assert await prober.probe_once("a") is Status.STARTING


async def test_a_never_ready_backend_past_a_short_grace_stays_dead_without_flapping() -> None:
    fetch, clock = ScriptedFetch(), Clock()
    registry = make("http://engine:8000", clock)
    prober = Prober(registry, ProbeConfig(startup_grace_s=5), fetch, warmup_bound=lambda name: 100.0)
    fetch.error = ConnectionRefusedError()
    seen = []
    for clock.now in (0.0, 3.0, 6.0, 7.0, 8.0, 12.0, 13.0):
        seen.append(await prober.probe_once("a"))
    assert seen == [Status.STARTING, Status.STARTING] + [Status.DEAD] * 5


async def test_a_restart_begun_since_the_refusals_began_gets_its_whole_warmup() -> None:
    fetch, clock = ScriptedFetch(), Clock()
    registry = make("http://engine:8000", clock)
    prober = Prober(registry, ProbeConfig(), fetch, warmup_bound=lambda name: 10.0)
    fetch.error = ConnectionRefusedError()
    await prober.probe_once("a")
    clock.now = 11.0
    assert await prober.probe_once("a") is Status.UNREACHABLE
    clock.now = 100.0
    registry.warming_from_now("a", "engine container starting")  # as engines/lifecycle.py does
    clock.now = 105.0
    assert await prober.probe_once("a") is Status.STARTING
    clock.now = 111.0
    assert await prober.probe_once("a") is Status.UNREACHABLE
