"""Engine lifecycle as Prometheus metrics, read from the manager at scrape time."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.engines.engine import RESIDENT
from gateway.engines.manager import EngineManager


class EngineCollector(Collector):
    def __init__(self, manager: EngineManager) -> None:
        self.manager = manager

    def collect(self) -> Iterator[Metric]:
        manager = self.manager
        starts = CounterMetricFamily(
            "gateway_engine_starts", "Engine containers the gateway started", labels=["engine"]
        )
        for name in manager.engines:
            starts.add_metric([name], manager.starts[name])
        stops = CounterMetricFamily(
            "gateway_engine_stops",
            "Engine containers stopped, by reason: idle, evicted, admin, exited (by hand or crashed)",
            labels=["engine", "reason"],
        )
        for (name, reason), count in manager.stops.items():
            stops.add_metric([name, reason], count)
        resident = GaugeMetricFamily(
            "gateway_engine_resident_memory_gib",
            "Memory footprint of the engines resident on each device, and its budget",
            labels=["device", "kind"],
        )
        for device, config in manager.settings.devices.items():
            resident.add_metric([device, "resident"], manager.resident_gib(device))
            resident.add_metric([device, "budget"], config.memory_gib)
        up = GaugeMetricFamily(
            "gateway_engine_resident", "1 while the engine's container holds its memory", labels=["engine"]
        )
        for name, engine in manager.engines.items():
            up.add_metric([name], 1.0 if engine.phase in RESIDENT else 0.0)
        yield starts
        yield stops
        yield resident
        yield up
