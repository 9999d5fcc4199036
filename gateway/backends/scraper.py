"""Background scraper of engine /metrics: the latest queue, KV and speculative-acceptance view per backend.

One asyncio task polls every backend about once per `interval_s` through an injected `fetch`
(gateway/backends/fetch.py: the app builds it from the upstream transport; tests pass a plain coroutine).
Each backend is fetched under its own timeout and all of them concurrently, so a slow or dead backend never
delays the others: its data simply goes stale (an answer other than 200 is a failed scrape too). Data older
than `stale_after_intervals` intervals is stale, and the router then ignores it and falls back to the
gateway's own measurements (docs/measurement.md). A backend's failures are logged once per change (and
its recovery once); the loop itself is a `BackgroundTask` (gateway/tasks.py), so even a round that fails
as a whole is logged, leaves every backend's data to age, and the next round runs. URLs are logged without
their credentials.

Each answer (any status) and each timeout is also reported to `listener` (backends/control_plane.py: the
hang watch), except a llama.cpp scrape's timeout: its /metrics waits for the engine's loop (one batch
step, seconds on a slow device during a long prefill), so only its /health, answered beside that loop,
speaks for it. A good scrape also tells it whether the engine's progress counters moved since the
previous one (engine_metrics.progressed): the hang watch's evidence that a slow engine is working.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.backends.control_plane import ControlPlaneListener
from gateway.backends.engine_metrics import (
    EngineMetrics,
    Flavor,
    SpecAcceptance,
    acceptance_between,
    parse_metrics,
    progress_counters,
    progressed,
)
from gateway.backends.fetch import Fetch
from gateway.clock import monotonic
from gateway.records import EngineHint
from gateway.redact import without_credentials
from gateway.tasks import BackgroundTask, FailureLog, describe

log = logging.getLogger(__name__)

Clock = Callable[[], float]

# Engines whose /metrics is answered beside the engine's loop, not by it: a scrape that times out there
# says the server itself is not answering (vLLM's API server, SGLang's tokenizer process).
_METRICS_BESIDE_THE_LOOP: frozenset[Flavor] = frozenset({"vllm", "sglang"})


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    backend: str
    url: str  # the full /metrics URL
    flavor: Flavor


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    backend: str
    taken_at: float  # scraper clock (monotonic unless injected)
    metrics: EngineMetrics
    acceptance: SpecAcceptance | None  # since the previous good scrape (first scrape: since start)
    acceptance_total: SpecAcceptance | None  # since the engine started
    # Requests queued (persisting_queue): waiting in this report and the previous good one, on an engine
    # that runs as many requests as it ever has.
    queued: float | None = None

    def age(self, now: float) -> float:
        return max(0.0, now - self.taken_at)


class MetricsScraper:
    """Polls each target's /metrics and keeps the latest good result per backend."""

    def __init__(
        self,
        targets: Iterable[ScrapeTarget],
        fetch: Fetch,
        *,
        interval_s: float = 1.0,
        timeout_s: float | None = None,
        stale_after_intervals: float = 3.0,
        clock: Clock = monotonic,
    ) -> None:
        if interval_s <= 0 or stale_after_intervals <= 0:
            raise ValueError("interval_s and stale_after_intervals must be positive")
        self.interval_s = interval_s
        # A fetch may never outlive the interval, so one dead backend cannot stretch a round.
        self.timeout_s = min(timeout_s, interval_s) if timeout_s is not None else 0.8 * interval_s
        self.stale_after_s = stale_after_intervals * interval_s
        self._fetch = fetch
        self._clock = clock
        self._targets: dict[str, ScrapeTarget] = {}
        self._latest: dict[str, ScrapeResult] = {}
        self._most_running: dict[str, float] = {}  # per backend: the most requests its engine ran at once
        # Per backend: what its engine ran at its latest report of a persisting queue, i.e. as many as it
        # could then (its sequence limit, or what its KV cache held): the spill's live capacity.
        self._full_at: dict[str, int] = {}
        self._failures: dict[str, FailureLog] = {}  # per backend: its current failure, logged once
        self.listener: ControlPlaneListener | None = None  # told of every scrape answered or timed out
        self._task = BackgroundTask(
            self._round, name="engine-metrics-scraper", on_error=self._round_failed, logger=log
        )
        self.set_targets(targets)

    def set_targets(self, targets: Iterable[ScrapeTarget]) -> None:
        """Replace the target set (backends change on reload); data of removed backends is dropped."""
        before, self._targets = self._targets, {t.backend: t for t in targets}
        for gone in set(self._latest) - set(self._targets):
            del self._latest[gone]
        for changed in [name for name in self._most_running if before.get(name) != self._targets.get(name)]:
            del self._most_running[changed]  # another engine may have another limit
        for changed in [name for name in self._full_at if before.get(name) != self._targets.get(name)]:
            del self._full_at[changed]
        for changed in [name for name in self._failures if before.get(name) != self._targets.get(name)]:
            del self._failures[changed]  # gone, or another target: its failures were the old one's

    def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        await self._task.stop()

    def backends(self) -> list[str]:
        """The backends being scraped, in target order."""
        return list(self._targets)

    def latest(self, backend: str) -> ScrapeResult | None:
        return self._latest.get(backend)

    def last_error(self, backend: str) -> str | None:
        """Why the most recent scrape of `backend` failed; None after a good one."""
        failures = self._failures.get(backend)
        return failures.error if failures is not None else None

    def is_fresh(self, backend: str, now: float | None = None) -> bool:
        result = self._latest.get(backend)
        if result is None:
            return False
        return result.age(self._clock() if now is None else now) <= self.stale_after_s

    def now(self) -> float:
        return self._clock()

    def hint(self, backend: str) -> EngineHint | None:
        """What the router may read of `backend`'s latest scrape, aged on this scraper's clock."""
        return hint_from_scrape(self._latest.get(backend), self._clock(), self.stale_after_s)

    def running_limit(self, backend: str) -> int | None:
        """How many requests `backend`'s engine runs at once, as last seen with a queue behind them (its
        limit, which vLLM does not announce); None before it was ever seen full. Kept while reports go
        stale: a limit does not age like a queue length does."""
        return self._full_at.get(backend)

    async def scrape_once(self) -> None:
        """One round: every target concurrently, each under its own timeout."""
        await asyncio.gather(*(self._scrape(target) for target in list(self._targets.values())))

    async def _round(self) -> float:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await self.scrape_once()
        return max(0.0, self.interval_s - (loop.time() - started))

    def _round_failed(self, exc: Exception) -> float:
        """A round that failed as a whole (BackgroundTask has logged it): no backend's data was renewed,
        and each says so until its next good scrape."""
        for target in list(self._targets.values()):
            self._fail(target, f"scrape round failed: {describe(exc)}")
        return self.interval_s

    async def _scrape(self, target: ScrapeTarget) -> None:
        try:
            # Bounded here too, so a fetch that overruns its own timeout cannot stretch a round.
            status, body = await asyncio.wait_for(self._fetch(target.url, {}, self.timeout_s), self.timeout_s)
            if self.listener is not None:
                self.listener.control_answered(target.backend)
            if status != 200:
                self._fail(target, f"HTTP {status}")
                return
            metrics = parse_metrics(body.decode("utf-8", errors="replace"), target.flavor)
            if self._targets.get(target.backend) != target:
                return  # the target was removed or changed while the fetch was in flight
            previous = self._latest.get(target.backend)
            most = max(self._most_running.get(target.backend, 0.0), metrics.running or 0.0)
            self._most_running[target.backend] = most
            result = ScrapeResult(
                backend=target.backend,
                taken_at=self._clock(),
                metrics=metrics,
                acceptance=acceptance_between(previous.metrics if previous else None, metrics),
                acceptance_total=acceptance_between(None, metrics),
                queued=persisting_queue(previous.metrics if previous else None, metrics, most),
            )
            if result.queued and metrics.running:
                self._full_at[target.backend] = int(metrics.running)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            self._fail(target, f"timed out after {self.timeout_s:.2f}s")
            if self.listener is not None and target.flavor in _METRICS_BESIDE_THE_LOOP:
                self.listener.control_unanswered(target.backend, self.timeout_s)
            return
        except Exception as exc:  # any failure of one backend stays that backend's problem
            self._fail(target, describe(exc))
            return
        self._latest[target.backend] = result
        self._failures_of(target).ok()
        if self.listener is not None and progress_counters(result.metrics) is not None:
            moved = progressed(previous.metrics if previous is not None else None, result.metrics)
            self.listener.engine_progress(target.backend, moved)

    def _fail(self, target: ScrapeTarget, why: str) -> None:
        if self._targets.get(target.backend) != target:
            return
        self._failures_of(target).failed(why)  # logged when it changes, not every second

    def _failures_of(self, target: ScrapeTarget) -> FailureLog:
        failures = self._failures.get(target.backend)
        if failures is None:
            what = f"metrics scrape of {target.backend} ({without_credentials(target.url)})"
            failures = self._failures[target.backend] = FailureLog(log, what, level=logging.INFO)
        return failures


# KV cache use from which an engine's waiting requests are a queue even while it runs fewer than it has:
# it cannot admit them for want of cache (vLLM preempts and requeues near a full pool).
KV_FULL = 0.9


def persisting_queue(
    previous: EngineMetrics | None, latest: EngineMetrics, most_running: float = 0.0
) -> float | None:
    """Requests that queue in the engine: waiting in both reports (the smaller count; the latest's when
    there is no previous), on an engine running as many requests as it ever has (`most_running`) or with
    its KV cache nearly full.

    A request that arrived during the engine's current step waits until the next one (vLLM admits at the
    step's end): one report shows it, and under steady arrivals every report may show another one. An
    engine that has run more requests at once than it runs now, with cache to spare, admits it then; that
    wait is a step, not a queue to route around (a spill onto another engine of the device would slow
    both for the whole request). An engine at its most, or out of cache, is where waiting means queueing.
    """
    if latest.waiting is None:
        return None
    room = latest.running is not None and latest.running < most_running
    if room and (latest.kv_usage is None or latest.kv_usage < KV_FULL):
        return 0.0
    if previous is None or previous.waiting is None:
        return latest.waiting
    return min(previous.waiting, latest.waiting)


def hint_from_scrape(result: ScrapeResult | None, now: float, stale_after_s: float) -> EngineHint | None:
    """The router's view of one scrape; `now` is on the scraper's clock (MetricsScraper.now()). Its
    queue is the one that persisted over the last two reports (ScrapeResult.queued)."""
    if result is None:
        return None
    m = result.metrics
    return EngineHint(result.queued, m.running, m.kv_usage, result.age(now), stale_after_s)
