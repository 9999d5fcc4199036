"""Prometheus gauges of the live estimates the router uses, read from the recorder at scrape time.

Per backend x profile: TTFT p50, mean TPOT, mean decode tok/s, error rate and sample count of the window;
per backend: the engine's speculative acceptance (rate and mean acceptance length, over the last scrape
interval) and the age of the last good scrape. Computed only when /metrics is scraped, so the request path
pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.backends.scraper import MetricsScraper
from gateway.stats.live import LiveRecorder

_CELL = ["backend", "profile"]


class LiveCollector(Collector):
    def __init__(self, recorder: LiveRecorder, scraper: MetricsScraper | None) -> None:
        self.recorder = recorder
        self.scraper = scraper

    def collect(self) -> Iterator[Metric]:
        yield from self._cells()
        if self.scraper is not None:
            yield from self._engines(self.scraper)

    def _cells(self) -> Iterator[Metric]:
        ttft = _gauge("gateway_live_ttft_p50_seconds", "Live TTFT p50 per backend x profile", _CELL)
        tpot = _gauge("gateway_live_tpot_seconds", "Live mean TPOT (decode only)", _CELL)
        tps = _gauge("gateway_live_decode_tokens_per_second", "Live mean decode tok/s per request", _CELL)
        errors = GaugeMetricFamily("gateway_live_error_rate", "Failed share of the window", labels=_CELL)
        samples = GaugeMetricFamily("gateway_live_samples", "Samples in the window", labels=_CELL)
        now = self.recorder.now()
        for backend, profile, _ in self.recorder.cells(now):
            s = self.recorder.summary(backend, profile, now)
            labels = [backend, profile]
            samples.add_metric(labels, s.count)
            errors.add_metric(labels, s.error_rate)
            for family, value in ((ttft, s.ttft_p50), (tpot, s.tpot_mean), (tps, s.decode_tps_mean)):
                if value is not None:
                    family.add_metric(labels, value)
        yield from (ttft, tpot, tps, errors, samples)

    def _engines(self, scraper: MetricsScraper) -> Iterator[Metric]:
        by = ["backend"]
        rate = _gauge("gateway_engine_spec_acceptance_rate", "Accepted / drafted tokens, last interval", by)
        length = _gauge("gateway_engine_spec_acceptance_length", "Tokens per speculative step (+bonus)", by)
        age = _gauge("gateway_engine_scrape_age_seconds", "Age of the last good /metrics scrape", by)
        now = scraper.now()
        for backend in scraper.backends():
            result = scraper.latest(backend)
            if result is None:
                continue
            age.add_metric([backend], result.age(now))
            acceptance = result.acceptance
            if acceptance is not None and acceptance.acceptance_rate is not None:
                rate.add_metric([backend], acceptance.acceptance_rate)
            if acceptance is not None and acceptance.mean_acceptance_length is not None:
                length.add_metric([backend], acceptance.mean_acceptance_length)
        yield from (rate, length, age)


def _gauge(name: str, documentation: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=labels)
