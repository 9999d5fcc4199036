"""Prometheus exposition: request metrics from the completion record, backend gauges at scrape time."""

from __future__ import annotations

from gateway_fakes import settings_for
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from gateway.backends.registry import Registry, Status
from gateway.records import RequestRecord
from gateway.stats.metrics import GatewayMetrics


def samples(metrics: GatewayMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def make() -> tuple[GatewayMetrics, Registry]:
    registry = Registry(settings_for({"a": "http://127.0.0.1:1"}))
    return GatewayMetrics(CollectorRegistry(), registry), registry


def test_a_finished_stream_feeds_every_request_metric() -> None:
    metrics, _ = make()
    record = RequestRecord("r", "m", "chat", "default", True, backend="a", status=200)
    record.ttft, record.itl, record.tpot, record.output_tokens, record.prompt_tokens = (
        0.2,
        [0.01, 0.02],
        0.015,
        3,
        7,
    )
    record.e2e, record.overhead = 0.25, 0.0004
    metrics.observe(record)
    got = samples(metrics)
    by = (("backend", "a"), ("profile", "default"))
    assert (
        got[
            (
                "gateway_requests_total",
                (("backend", "a"), ("model", "m"), ("profile", "default"), ("status", "200")),
            )
        ]
        == 1
    )
    assert got[("gateway_ttft_seconds_count", by)] == 1
    assert got[("gateway_itl_seconds_count", by)] == 2
    assert got[("gateway_tpot_seconds_sum", by)] == 0.015
    assert got[("gateway_output_tokens_total", by)] == 3
    assert got[("gateway_prompt_tokens_total", by)] == 7
    assert got[("gateway_request_duration_seconds_count", by)] == 1
    assert got[("gateway_overhead_seconds_count", ())] == 1


def test_error_after_200_is_counted_as_a_stream_error_and_failovers_per_backend() -> None:
    metrics, _ = make()
    record = RequestRecord("r", "m", "chat", "default", True, backend="a", status=200, error="engine failed")
    record.failures = [("b", "HTTP 503")]
    metrics.observe(record)
    got = samples(metrics)
    assert (
        got[
            (
                "gateway_requests_total",
                (("backend", "a"), ("model", "m"), ("profile", "default"), ("status", "stream_error")),
            )
        ]
        == 1
    )
    assert got[("gateway_upstream_failures_total", (("backend", "b"),))] == 1


def test_a_stream_broken_mid_answer_is_counted_by_backend_and_cause_continued_or_not() -> None:
    metrics, _ = make()
    record = RequestRecord("r", "m", "chat", "default", True, backend="b", status=200)
    record.stream_breaks = [("a", "stream_ended_early"), ("b", "upstream_stream_error")]
    metrics.observe(record)
    metrics.observe(RequestRecord("s", "m", "chat", "default", True, backend="a", status=200))
    got = samples(metrics)
    key = "gateway_stream_breaks_total"
    assert got[(key, (("backend", "a"), ("cause", "stream_ended_early")))] == 1
    assert got[(key, (("backend", "b"), ("cause", "upstream_stream_error")))] == 1


def test_backend_gauges_are_read_at_scrape_time() -> None:
    metrics, registry = make()
    registry.set_status("a", Status.READY)
    registry.acquire("a")
    got = samples(metrics)
    assert got[("gateway_backend_inflight", (("backend", "a"),))] == 1
    assert got[("gateway_backend_ready", (("backend", "a"),))] == 1
    assert got[("gateway_backend_status", (("backend", "a"), ("status", "ready")))] == 1


def test_every_metric_name_has_the_gateway_prefix() -> None:
    metrics, _ = make()
    metrics.observe(RequestRecord("r", "m", "chat", "default", False, backend="a", status=200))
    names = {f.name for f in text_string_to_metric_families(metrics.exposition().decode())}
    assert names and all(name.startswith("gateway_") for name in names)


def test_the_queue_wait_has_its_own_histogram_per_pool_and_stays_out_of_the_overhead() -> None:
    metrics, _ = make()
    waited = RequestRecord("r1", "m", "chat", "default", False, backend="a", status=200)
    waited.overhead, waited.queue_wait = 0.0004, 2.0
    metrics.observe(waited)
    metrics.observe(RequestRecord("r2", "m", "chat", "default", False, backend="a", status=200))
    got = samples(metrics)
    pool = (("pool", "m"),)
    assert got[("gateway_queue_wait_seconds_count", pool)] == 2
    assert got[("gateway_queue_wait_seconds_sum", pool)] == 2.0
    assert got[("gateway_queue_wait_seconds_bucket", (("le", "0.001"), ("pool", "m")))] == 1  # r2: no wait
    assert got[("gateway_queue_wait_seconds_bucket", (("le", "2.5"), ("pool", "m")))] == 2
    assert got[("gateway_overhead_seconds_sum", ())] == 0.0004
