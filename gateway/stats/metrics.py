"""Prometheus metrics, all named `gateway_*`, on a CollectorRegistry owned by the app (no global registry).

Request metrics are fed by one observer of the dispatch completion record; per-backend gauges (in-flight,
readiness) are read from the backend registry at scrape time, so the request path pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.backends.registry import Registry, Status
from gateway.records import RequestRecord

# Seconds. LLM latencies span four orders of magnitude: ITL in ms, TTFT up to minutes of prefill.
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_ITL = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5)
_OVERHEAD = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)
# Seconds. Most requests take a slot at once (the first bucket); a full pool frees one within seconds;
# a warm-up wait lasts up to queue.warming_wait_s, which operators may set to minutes.
_QUEUE = (0.001, 0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry, backends: Registry) -> None:
        self.registry = registry
        by = ["backend", "profile"]
        self.requests = Counter(
            "gateway_requests",
            "Requests by outcome",
            ["model", "profile", "backend", "status"],
            registry=registry,
        )
        self.duration = Histogram(
            "gateway_request_duration_seconds", "End-to-end time", by, buckets=_LATENCY, registry=registry
        )
        self.ttft = Histogram(
            "gateway_ttft_seconds", "Time to first token", by, buckets=_LATENCY, registry=registry
        )
        self.itl = Histogram("gateway_itl_seconds", "Inter-token gaps", by, buckets=_ITL, registry=registry)
        self.tpot = Histogram(
            "gateway_tpot_seconds", "Time per output token", by, buckets=_ITL, registry=registry
        )
        self.output_tokens = Counter("gateway_output_tokens", "Output tokens", by, registry=registry)
        self.prompt_tokens = Counter("gateway_prompt_tokens", "Prompt tokens", by, registry=registry)
        self.failovers = Counter(
            "gateway_upstream_failures",
            "Attempts that failed before the first byte",
            ["backend"],
            registry=registry,
        )
        self.stream_breaks = Counter(
            "gateway_stream_breaks",
            "Streams that broke after content went out (continued elsewhere or ended with an error frame)",
            ["backend", "cause"],
            registry=registry,
        )
        self.overhead = Histogram(
            "gateway_overhead_seconds",
            "The gateway's own time per request before the upstream call (parse, route, rewrite)",
            buckets=_OVERHEAD,
            registry=registry,
        )
        self.queue_wait = Histogram(
            "gateway_queue_wait_seconds",
            "Time a request waited for a backend slot (a full pool, a warming backend)",
            ["pool"],
            buckets=_QUEUE,
            registry=registry,
        )
        self.policy_reloads = Counter(
            "gateway_policy_reloads", "Policy file reload attempts", ["result"], registry=registry
        )
        registry.register(_BackendCollector(backends))
        self._cells: dict[tuple[str, str], _Cell] = {}
        self._requests: dict[tuple[str, ...], Counter] = {}
        self._queue_waits: dict[str, Histogram] = {}  # per pool: bounded by the config

    def count_policy_reload(self, result: str, error: str | None) -> None:
        self.policy_reloads.labels(result).inc()

    def observe(self, record: RequestRecord) -> None:
        backend = record.backend or "none"
        status = "stream_error" if record.status == 200 and record.error else str(record.status)
        self._requests_child(record.model, record.profile, backend, status).inc()
        self.overhead.observe(record.overhead)
        self._queue_wait_child(record.model).observe(record.queue_wait)
        for failed, _why in record.failures:
            self.failovers.labels(failed).inc()
        for broken, cause in record.stream_breaks:  # causes: a handful of fixed codes (proxy/relay.py)
            self.stream_breaks.labels(broken, cause).inc()
        if record.backend is None:
            return
        cell = self._cell(backend, record.profile)
        cell.duration.observe(record.e2e)
        if record.ttft is not None:
            cell.ttft.observe(record.ttft)
        for gap in record.itl:
            cell.itl.observe(gap)
        if record.tpot is not None:
            cell.tpot.observe(record.tpot)
        if record.output_tokens:
            cell.output_tokens.inc(record.output_tokens)
        if record.prompt_tokens:
            cell.prompt_tokens.inc(record.prompt_tokens)

    def _requests_child(self, *key: str) -> Counter:
        # Bounded like the cells: models and backends from the config, statuses from HTTP.
        child = self._requests.get(key)
        if child is None:
            child = self._requests[key] = self.requests.labels(*key)
        return child

    def _queue_wait_child(self, pool: str) -> Histogram:
        child = self._queue_waits.get(pool)
        if child is None:
            child = self._queue_waits[pool] = self.queue_wait.labels(pool)
        return child

    def _cell(self, backend: str, profile: str) -> _Cell:
        # labels() costs a lock and a dict build per call; the children per (backend, profile) are
        # resolved once. Bounded: backends come from the config, profiles from the policy.
        key = (backend, profile)
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = _Cell(
                self.duration.labels(*key),
                self.ttft.labels(*key),
                self.itl.labels(*key),
                self.tpot.labels(*key),
                self.output_tokens.labels(*key),
                self.prompt_tokens.labels(*key),
            )
        return cell

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


@dataclass(frozen=True, slots=True)
class _Cell:
    duration: Histogram
    ttft: Histogram
    itl: Histogram
    tpot: Histogram
    output_tokens: Counter
    prompt_tokens: Counter


class _BackendCollector(Collector):
    def __init__(self, backends: Registry) -> None:
        self.backends = backends

    def collect(self) -> Iterator[Metric]:
        inflight = GaugeMetricFamily(
            "gateway_backend_inflight", "Requests in flight per backend", labels=["backend"]
        )
        ready = GaugeMetricFamily("gateway_backend_ready", "1 if the backend is ready", labels=["backend"])
        status = GaugeMetricFamily(
            "gateway_backend_status", "1 for the backend's current status", labels=["backend", "status"]
        )
        for name, state in self.backends.backends.items():
            inflight.add_metric([name], state.inflight)
            ready.add_metric([name], 1.0 if state.status is Status.READY else 0.0)
            for value in Status:
                status.add_metric([name, str(value)], 1.0 if state.status is value else 0.0)
        yield inflight
        yield ready
        yield status
