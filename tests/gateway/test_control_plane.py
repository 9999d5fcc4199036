"""The prober and the engine-metrics scraper reach the backends only through the transport seam: with an
in-process MockTransport, probes and scrapes land in its GET handler and no socket is opened."""

from __future__ import annotations

from collections.abc import Mapping

from gateway_fakes import settings_for

from gateway.app import build_gateway
from gateway.backends.registry import Status
from gateway.proxy.upstream import MockResponse, MockTransport

METRICS = (
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{engine="0",model_name="m"} 2\n'
    "# TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{engine="0",model_name="m"} 5\n'
    "# TYPE vllm:kv_cache_usage_perc gauge\n"
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
)


class Engine:
    """Answers the GETs of one vLLM engine at http://engine-a:8000 (an address nothing resolves)."""

    def __init__(self) -> None:
        self.gets: list[tuple[str, float]] = []

    async def get(self, url: str, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
        self.gets.append((url, timeout_s))
        path = url.removeprefix("http://engine-a:8000")
        if path == "/health":
            return 200, b""
        if path == "/v1/models":
            return 200, b'{"object":"list","data":[{"id":"a-model","max_model_len":8192}]}'
        if path == "/metrics":
            return 200, METRICS.encode()
        return 404, b""


async def _no_posts(url: str, headers: Mapping[str, str], body: bytes) -> MockResponse:
    raise AssertionError(f"no request was sent, yet {url} got a POST")


async def test_probes_and_scrapes_go_through_the_transport_get() -> None:
    engine = Engine()
    settings = settings_for({"a": "http://engine-a:8000"})
    gateway = build_gateway(settings, transport=MockTransport(_no_posts, get_handler=engine.get))
    try:
        assert await gateway.prober.probe_once("a") is Status.READY
        assert gateway.registry.backends["a"].context_length == 8192  # discovered through the seam too
        assert gateway.measurement is not None and gateway.measurement.scraper is not None
        await gateway.measurement.scraper.scrape_once()
        scraped = gateway.measurement.scraper.latest("a")
        assert scraped is not None and scraped.metrics.waiting == 5.0
    finally:
        await gateway.prober.stop()
        await gateway.transport.aclose()
    probe_timeout = settings.probe.timeout_s
    assert ("http://engine-a:8000/health", probe_timeout) in engine.gets
    assert [url for url, _ in engine.gets][-1] == "http://engine-a:8000/metrics"


async def test_a_transport_without_a_get_handler_reads_as_nothing_listening() -> None:
    settings = settings_for({"a": "http://engine-a:8000"})
    gateway = build_gateway(settings, transport=MockTransport(_no_posts))
    try:
        assert await gateway.prober.probe_once("a") is Status.STARTING  # refused within the startup grace
    finally:
        await gateway.prober.stop()
        await gateway.transport.aclose()
