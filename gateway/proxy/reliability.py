"""The reliability state of a running gateway: one circuit breaker per backend and the admission slots and
wait queues, made from the settings by the composition root and shared by ingress, dispatch, the admin
routes and the metrics.

- Readiness reaches admission through `on_status` (a registry listener): only ready backends give slots,
  and a backend that becomes ready serves the requests waiting for it at once.
- The router's fallback (routing/pipeline/filters.py `once_back`: what could serve once a backend has warmed
  up, has room or has cooled down) lets ingress wait in the bounded queue for those backends instead of
  refusing a request that could still be served.
- When every backend that could serve a request is warming up, the request waits `warming_wait_s` for
  the first to be ready; then `warming_refusal` answers 503 `backends_warming` with the time the first is
  still expected to take (backends/warmup.py) as Retry-After: a warm-up is never reported as capacity.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.backends.registry import Status
from gateway.backends.warmup import Warming, Warmups
from gateway.proxy.admission import Admission, AdmissionConfig, Refused
from gateway.proxy.breaker import BreakerConfig, Breakers, StateName
from gateway.proxy.stall import StallWatch
from gateway.settings import Settings

# Prometheus value of each breaker state: 0 closed, 1 half-open, 2 open.
BREAKER_LEVEL: dict[StateName, float] = {"closed": 0.0, "half_open": 1.0, "open": 2.0}

ERROR_SOURCE = b"x-gateway-error-source"  # "gateway" (the gateway refused) or "upstream" (a backend failed)
WARMING = "backends_warming"  # the refusal code when every candidate is warming up


class Reliability:
    """Breakers and admission for every configured backend and pool."""

    def __init__(self, settings: Settings, warmups: Warmups) -> None:
        b, q = settings.breaker, settings.queue
        self.warmups = warmups
        self.warming_wait_s = q.timeout_s if q.warming_wait_s is None else q.warming_wait_s
        self.breakers = Breakers(
            [backend.name for backend in settings.backends],
            BreakerConfig(
                failure_threshold=b.failure_threshold,
                window_seconds=b.window_s,
                min_window_requests=b.min_window_requests,
                failure_rate_threshold=b.failure_rate,
                cooldown_seconds=b.cooldown_s,
                max_cooldown_seconds=b.max_cooldown_s,
                half_open_probes=b.half_open_probes,
            ),
        )
        # Slots count on the registry's in-flight count (the registry the warm-ups follow): one count.
        config = AdmissionConfig(q.max_queue, q.timeout_s, q.retry_after_s)
        self.admission = Admission(config, warmups.registry.inflight)
        self.admission.configure({backend.name: backend.max_concurrency for backend in settings.backends})
        self.stall = StallWatch(settings.stall, warmups.registry)  # hang detection (proxy/stall.py)

    def on_status(self, backend: str, status: Status) -> None:
        """Registry listener: the prober's verdict opens or closes the backend's slots. A backend that
        is ready again after being down (restarted, or answering again) starts with a closed breaker:
        the failures of its previous life would otherwise keep it out, in ever longer cool-downs."""
        ready = status is Status.READY
        self.admission.set_ready(backend, ready)
        self.admission.set_gone(backend, status is Status.UNREACHABLE)
        if ready and backend in self.breakers:
            self.breakers[backend].reset()

    def breaker_open(self, backend: str) -> bool:
        return backend in self.breakers and self.breakers.is_open(backend)

    def details(self, backend: str) -> dict[str, Any]:
        """The breaker and admission state of one backend, for /gateway/backends."""
        out: dict[str, Any] = {}
        if backend in self.breakers:
            out["breaker"] = dataclasses.asdict(self.breakers[backend].snapshot())
        load = self.admission.backends().get(backend)
        if load is not None:
            out["slots"] = {"inflight": load.inflight, "limit": load.limit, "ready": load.ready}
        if backend in self.warmups.registry.backends:
            out.update(self.warmups.details(backend))
            out["stall_watch"] = self.stall.details(backend)
        return out

    def warming_refusal(self, pool: str, backends: Iterable[str], ahead_s: float = 0.0) -> Refused | None:
        """503 `backends_warming` when every one of `backends` is warming up, None otherwise; the time it
        tells the client to come back is kept as a promise on the first to be ready (Registry.promise).
        `ahead_s`: the answer as it will be that many seconds from now."""
        first = self.warmups.first_ready(backends)
        if first is None:
            return None
        registry = self.warmups.registry
        refused = warming_refused(pool, first, ahead_s, registry.backends[first.backend].detail)
        registry.promise(first.backend, registry.clock() + ahead_s + refused.retry_after)
        return refused

    def unreachable_refusal(self, pool: str, backends: Iterable[str]) -> Refused | None:
        """503 `backend_unreachable` naming each of `backends` and where nothing listens, when every one
        is unreachable; None otherwise."""
        registry = self.warmups.registry
        states = [registry.backends[name] for name in backends if name in registry.backends]
        if not states or any(state.status is not Status.UNREACHABLE for state in states):
            return None
        said = "; ".join(f"{state.config.name}: unreachable: {state.detail}" for state in states)
        message = f"no backend for model {pool} can be reached ({said})"
        return Refused(503, "backend_unreachable", message, self.admission.config.retry_after_seconds)

    def queues(self) -> dict[str, dict[str, int]]:
        return {
            pool: {"waiting": q.waiting, "max_queue": q.max_queue}
            for pool, q in self.admission.queues().items()
        }


def warming_refused(pool: str, first: Warming, ahead_s: float = 0.0, seen: str = "") -> Refused:
    """The refusal for a pool whose backends are all warming, `first` being the one expected ready first;
    `seen`, what its probes last met when they got no answer ("connection refused at host:port"), so a
    wrong URL does not pass for a warm-up. Retry-After is its time left (rounded up, at least 1 s);
    nothing in it speaks of capacity."""
    left = first.expected_s - first.elapsed_s - ahead_s
    what = "warming up or restarting" if first.restarting else "warming up"
    if left > 0:
        when = f"the first ({first.backend}) is expected ready in ~{_span(left)}"
    else:
        late = _span(-left)
        when = f"the first ({first.backend}) was expected ready {late} ago and may be ready any moment"
    retry_after = max(1, math.ceil(left))
    message = f"all backends for model {pool} are {what}; {when} (Retry-After: {retry_after} s)"
    if seen.startswith("no answer: "):
        message += f"; its probes meet {seen.removeprefix('no answer: ')}"
    return Refused(503, WARMING, message, retry_after)


def _span(seconds: float) -> str:
    """A duration as people say it: seconds under a minute and a half, then minutes, then hours."""
    if seconds < 90:
        return f"{max(1, math.ceil(seconds))} s"  # rounded up, like Retry-After
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def refusal_headers(refused: Refused) -> list[tuple[bytes, bytes]]:
    return [(b"retry-after", str(refused.retry_after).encode()), (ERROR_SOURCE, b"gateway")]


class ReliabilityCollector(Collector):
    """Breaker states and queue depths, read at scrape time so the request path pays nothing."""

    def __init__(self, reliability: Reliability) -> None:
        self.reliability = reliability

    def collect(self) -> Iterator[Metric]:
        state = GaugeMetricFamily(
            "gateway_backend_breaker_state",
            "Circuit breaker per backend: 0 closed, 1 half-open, 2 open",
            labels=["backend"],
        )
        opened = CounterMetricFamily(
            "gateway_backend_breaker_opened", "Times the backend's breaker opened", labels=["backend"]
        )
        for name, snap in self.reliability.breakers.snapshot().items():
            state.add_metric([name], BREAKER_LEVEL[snap.state])
            opened.add_metric([name], snap.times_opened)
        waiting = GaugeMetricFamily(
            "gateway_queue_waiting", "Requests waiting for a backend slot per pool", labels=["pool"]
        )
        for pool, queue in self.reliability.admission.queues().items():
            waiting.add_metric([pool], queue.waiting)
        yield state
        yield opened
        yield waiting
        yield from self._stalls()

    def _stalls(self) -> Iterator[Metric]:
        registry = self.reliability.warmups.registry
        stalled = GaugeMetricFamily(
            "gateway_backend_stalled",
            "1 while the backend is stalled: its engine made no progress for longer than its work explains",
            labels=["backend"],
        )
        counters = {
            "suspected": (
                "gateway_backend_stall_suspicions",
                "Times the backend's requests waited longer than their work explains (suspected of a stall)",
            ),
            "confirmed": ("gateway_backend_stalls", "Times the backend was found stalled (confirmed)"),
            "cleared": (
                "gateway_backend_stall_cleared_by_progress",
                "Suspicions cleared by the engine's own "
                "progress (bytes or /metrics counters): slow, not stalled",
            ),
            "moved": (
                "gateway_backend_stall_failovers",
                "Requests waiting for their first content on a stalled or dead backend, moved elsewhere",
            ),
            "ended": (
                "gateway_backend_stall_stream_ends",
                "Streams under way on a stalled backend, ended with an error frame before the idle timeout",
            ),
        }
        families = {
            key: CounterMetricFamily(name, text, labels=["backend"]) for key, (name, text) in counters.items()
        }
        counts = self.reliability.stall.counts()
        for name, state in registry.backends.items():
            stalled.add_metric([name], 0.0 if state.stalled_since is None else 1.0)
            of = counts.get(name)
            for key, family in families.items():
                family.add_metric([name], getattr(of, key) if of is not None else 0)
        yield stalled
        yield from families.values()
