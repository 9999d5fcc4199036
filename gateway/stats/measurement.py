"""Live measurement wired together: completion records -> LiveRecorder, requests in flight -> ProgressBook
(filled by dispatch accounting), the engine /metrics scraper, and snapshots of the windows in the state
directory (docs/measurement.md).

`Measurement` is made once by the composition root and started and stopped with the app: it loads the last
snapshot at start, scrapes every backend whose flavor exposes engine metrics, saves the windows
periodically and once more at shutdown. Without a state directory (twin fleets, benches, tests) it keeps
no state at all: nothing is read or written. `observe` is a dispatch observer; `record_sample` is the pure
translation of one completion record into a `Sample` (or None when the record says nothing about speed).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from gateway.backends.engine_metrics import FLAVORS, Flavor
from gateway.backends.fetch import Fetch
from gateway.backends.identity import BackendIdentity, identity
from gateway.backends.scraper import MetricsScraper, ScrapeTarget
from gateway.records import Sample
from gateway.repetition import prompt_repetition
from gateway.settings import BackendConfig, MeasurementConfig, PoolConfig
from gateway.stats import snapshot
from gateway.stats.live import LiveRecorder
from gateway.stats.progress import ProgressBook

log = logging.getLogger(__name__)


class Completion(Protocol):
    """The fields of a dispatch completion record (proxy.dispatch.RequestRecord) a sample needs."""

    @property
    def backend(self) -> str | None: ...

    @property
    def profile(self) -> str: ...

    @property
    def status(self) -> int: ...

    @property
    def error(self) -> str | None: ...

    @property
    def inflight_at_dispatch(self) -> int: ...

    @property
    def device_inflight_at_dispatch(self) -> int: ...

    @property
    def device_shared_s(self) -> float: ...

    @property
    def load_s(self) -> float: ...

    @property
    def ttft(self) -> float | None: ...

    @property
    def e2e(self) -> float: ...

    @property
    def overhead(self) -> float: ...

    @property
    def queue_wait(self) -> float: ...

    @property
    def itl(self) -> Sequence[float]: ...

    @property
    def output_tokens(self) -> int | None: ...

    @property
    def prompt_tokens(self) -> int | None: ...

    @property
    def ended_by_gateway(self) -> bool: ...


def record_sample(record: Completion) -> Sample | None:
    """One finished request as a Sample, timed from dispatch (the gateway's own overhead and the time it
    waited for a slot removed).

    Not recorded: requests that never reached a backend, client disconnects and requests the gateway
    ended itself at a shutdown's drain deadline (a cut-short timing says nothing about the backend) and
    4xx answers (the request's fault, not the backend's). A 5xx, a transport
    failure or an error inside a started stream is an error sample: it counts in the error rate.
    """
    if record.backend is None or record.status == 0 or record.status == 499 or record.ended_by_gateway:
        return None
    if 400 <= record.status < 500:
        return None
    failed = record.status >= 500 or record.error is not None
    before = record.overhead + record.queue_wait  # arrival -> dispatch
    ttft = None if record.ttft is None else max(0.0, record.ttft - before)
    gaps = record.itl
    return Sample(
        e2e=max(0.0, record.e2e - before),
        ttft=ttft,
        output_tokens=record.output_tokens or 0,
        prompt_tokens=record.prompt_tokens or 0,
        concurrency=max(1, record.inflight_at_dispatch),
        # On a shared device the other engines' requests slow this one too: kept apart from its own
        # batch, so the fit can tell the two effects apart (routing/model/fitting.py).
        device_share=_share(record.device_shared_s, record.e2e - before),
        mean_load=_mean_load(record.load_s, record.e2e - before),
        error=failed,
        mean_itl=sum(gaps) / len(gaps) if gaps else None,
        trimmed_itl=trimmed_mean(gaps) if gaps else None,
        # Read after the answer went out (bounded work): a speculative engine's decode speed depends on it.
        repetition=_repetition(getattr(record, "body", None)),  # a record without its request: novel
    )


def _mean_load(load_s: float, seconds: float) -> float | None:
    """The mean in-flight count over an attempt of `seconds`; None when it lasted no time to divide."""
    return load_s / seconds if seconds > 0 and load_s > 0 else None


def trimmed_mean(gaps: Sequence[float], trim: float = 0.1) -> float:
    """The mean of `gaps` without the longest `trim` share of them (at least one gap is kept)."""
    kept = sorted(gaps)[: max(1, math.ceil(len(gaps) * (1.0 - trim)))]
    return sum(kept) / len(kept)


def _repetition(body: Mapping[str, Any] | None) -> float:
    return prompt_repetition(body.get("messages"), body.get("prompt")) if body else 0.0


def _share(shared_s: float, span_s: float) -> float:
    return min(1.0, max(0.0, shared_s / span_s)) if span_s > 0 else 0.0


def backend_identities(
    backends: Sequence[BackendConfig], pools: Sequence[PoolConfig]
) -> dict[str, BackendIdentity]:
    """Each backend's identity for snapshots: name, URL and the model names its pools send it."""
    served = {b.name: [p.served_name(b.name) for p in pools if b.name in p.backends] for b in backends}
    return {b.name: identity(b.name, b.url, served[b.name]) for b in backends}


def scrape_targets(backends: Iterable[BackendConfig]) -> list[ScrapeTarget]:
    """One target per backend whose flavor exposes engine metrics (a generic `openai` upstream does not)."""
    flavors: tuple[str, ...] = FLAVORS
    return [
        ScrapeTarget(b.name, f"{b.url}/metrics", _flavor(b.flavor)) for b in backends if b.flavor in flavors
    ]


def _flavor(name: str) -> Flavor:
    for flavor in FLAVORS:
        if flavor == name:
            return flavor
    raise ValueError(f"no engine metrics for flavor {name!r}")


class Measurement:
    """The recorder, the scraper and the snapshot saver of one gateway, started and stopped together."""

    def __init__(
        self,
        config: MeasurementConfig,
        backends: Sequence[BackendConfig],
        state_dir: Path | None,
        fetch: Fetch | None,
        pools: Sequence[PoolConfig] = (),
    ) -> None:
        self.config = config
        self.recorder = LiveRecorder(max_age_s=config.window_s)
        self.progress = ProgressBook()  # requests in flight, as far as each has gone (never persisted)
        self.state_dir = state_dir  # None: no state kept
        self._identities = backend_identities(backends, pools)
        targets = scrape_targets(backends)
        self.scraper = (
            MetricsScraper(targets, fetch, interval_s=config.scrape_interval_s)
            if fetch is not None and targets
            else None
        )
        self._saver = (
            snapshot.SnapshotSaver(
                self.recorder, state_dir, self._identities, interval_s=config.snapshot_interval_s
            )
            if state_dir is not None
            else None
        )
        self.restored = 0

    def observe(self, record: Completion) -> None:
        """Dispatch observer: every finished request lands in its (backend, profile) window."""
        for backend, attempt in getattr(record, "moved_attempts", ()):
            if (partial := record_sample(attempt)) is not None:
                self.recorder.record(backend, record.profile, partial)
        if record.backend is None:
            return
        sample = record_sample(record)
        if sample is None:
            return
        moved = getattr(record, "moved_from", ())  # cut to finish on a faster engine: not a failure
        broken = [b for b in getattr(record, "resumed_from", ()) if b not in moved]
        # An engine that failed before the first byte was failed over: the client never saw it, but its
        # failure rate is what routing to it costs (each one is a retry, often onto its device's
        # neighbour), so it counts in its error rate like a broken stream.
        refused = [b for b, _ in getattr(record, "failures", ()) if b not in broken and b != record.backend]
        for backend in refused:
            self.recorder.record(backend, record.profile, replace(sample, error=True, ttft=None))
        for backend in broken:  # its stream broke: it failed the request
            self.recorder.record(backend, record.profile, replace(sample, error=True))
        if broken or moved:  # its timing spans two engines: no timing of either
            return
        self.recorder.record(record.backend, record.profile, sample)

    async def start(self) -> None:
        if self.state_dir is not None and self._saver is not None:
            now = self.recorder.now()
            self.restored = snapshot.load(self.recorder, self.state_dir, now, self._identities)
            if self.restored:
                log.info("restored %d live samples from %s", self.restored, self.state_dir)
            self._saver.start()
        if self.scraper is not None:
            self.scraper.start()

    async def stop(self) -> None:
        if self.scraper is not None:
            await self.scraper.stop()
        if self._saver is None:
            return
        try:
            await self._saver.stop()  # cancels the periodic task, then saves once more
        except OSError as exc:  # an unwritable state dir must not turn a shutdown into a crash
            log.warning("stats snapshot at shutdown failed: %s", exc)
