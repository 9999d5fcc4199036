"""Prometheus text rendering for the flavors that use prometheus_client themselves (vLLM, SGLang)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gateway.sim.flavors.observed import Histogram
from gateway.sim.model import EngineStats


class _Snapshot(Collector):
    def __init__(self, families: Sequence[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return iter(self._families)


class Families:
    """Metric families with one fixed label set, built per scrape from the engine's current numbers."""

    def __init__(self, labels: dict[str, str]) -> None:
        self._names = list(labels)
        self._values = list(labels.values())
        self._families: list[Metric] = []

    def gauge(self, name: str, doc: str, value: float) -> None:
        family = GaugeMetricFamily(name, doc, labels=self._names)
        family.add_metric(self._values, value)
        self._families.append(family)

    def counter(self, name: str, doc: str, value: float) -> None:
        """`name` without `_total`; the exposition adds it, as prometheus_client does for the engines."""
        family = CounterMetricFamily(name, doc, labels=self._names)
        family.add_metric(self._values, value)
        self._families.append(family)

    def labelled_counter(self, name: str, doc: str, label: str, values: dict[str, float]) -> None:
        family = CounterMetricFamily(name, doc, labels=[*self._names, label])
        for key, value in values.items():
            family.add_metric([*self._values, key], value)
        self._families.append(family)

    def histogram(self, name: str, doc: str, hist: Histogram) -> None:
        family = HistogramMetricFamily(name, doc, labels=self._names)
        family.add_metric(self._values, buckets=hist.cumulative(), sum_value=hist.sum)
        self._families.append(family)

    def render(self) -> str:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Snapshot(self._families))
        return generate_latest(registry).decode()


def kv_usage(stats: EngineStats) -> float:
    """The used share of the KV-cache pool, 0..1, as both engines' usage gauges report it."""
    return min(1.0, stats.kv_used_tokens / max(1, stats.kv_capacity_tokens))
