"""Dispatch accounting: what one request's trip upstream does to the books.

- In-flight: one count per backend, the registry's (backends/inflight.py). A request is counted from
  the moment it is given a backend (its admission slot, or a hold on the count without admission) until
  its answer ends, streams and failover attempts included (pitfall 4); nothing here keeps a count of
  its own. The load a request met at dispatch is read from it.
- Device time: how long a request shared its device with another backend's requests, integrated over
  the same count (`DeviceTime`).
- Progress: with a `ProgressBook` attached (`track`), each attempt is noted there from dispatch to its
  end, so the router sees requests in flight before they finish (stats/progress.py).
- Health notes: a backend that answers is alive; one that refuses the connection is down (passive
  health, written to the registry).
- The record: `on_dispatch` listeners hear once per request where it first went upstream, and the
  finished `RequestRecord` goes to the observers (Prometheus, live stats, a router's `observe`), so new
  recorders attach without touching dispatch. A broken listener or observer is logged, never fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from gateway.backends.inflight import InFlight
from gateway.backends.registry import Registry
from gateway.clock import monotonic
from gateway.proxy.exchange import Exchange, Job
from gateway.proxy.stream import SseMeter, usage_counts
from gateway.records import RequestRecord
from gateway.stats.progress import ProgressBook

log = logging.getLogger("gateway.dispatch")

Clock = Callable[[], float]
Observer = Callable[[RequestRecord], None]
# Called once per request, with the backend, when its first attempt is about to be sent upstream.
DispatchListener = Callable[[Job, str], None]


class Marks(NamedTuple):
    """A backend's device-time readings when an attempt started (`Accounting.dispatching`)."""

    shared_s: float
    load_s: float


class DeviceTime:
    """Per backend, the seconds during which another backend of its device had requests in flight, and
    its in-flight count integrated over time (over a request's life, its mean load: Sample.mean_load).

    It reads the in-flight count and is told (as a watcher) just before any count changes; reading a
    backend's total when a request starts and when it ends gives how long that request shared the device
    (Sample.device_share), and a decode probe's (proxy/decode_probe.py, which no count sees). A backend
    without a device never shares; one with a device accrues from the start, idle or not (only the spans
    of its own requests and probes are ever read). O(backends) per change, no task, no lock (the event
    loop is the only caller).
    """

    def __init__(self, counts: InFlight, devices: Mapping[str, str | None], clock: Clock = monotonic) -> None:
        self._counts = counts
        self._device = {backend: device for backend, device in devices.items() if device is not None}
        self._clock = clock
        self._since = clock()
        self._shared: dict[str, float] = {}
        self._load: dict[str, float] = {}
        counts.watchers.append(self._advance)

    def shared_seconds(self, backend: str) -> float:
        """`backend`'s total now. A read changes nothing: the totals move only as the counts do, with the
        span since the last change added here, so how often they are read changes no sum (not even its
        rounding, which a stream mover reading every second otherwise made differ from one without)."""
        return self._shared.get(backend, 0.0) + (self._pending() if self._shares(backend) else 0.0)

    def marks(self, backend: str) -> Marks:
        """Both readings of `backend` now: their differences over an attempt are its shared seconds and
        its load-seconds."""
        load = self._load.get(backend, 0.0) + self._counts[backend] * self._pending()
        return Marks(self.shared_seconds(backend), load)

    def _pending(self) -> float:
        return max(self._clock() - self._since, 0.0)

    def _shares(self, backend: str) -> bool:
        """Whether another backend of `backend`'s device has requests in flight now."""
        device = self._device.get(backend)
        return device is not None and any(
            self._counts[other] > 0 for other, d in self._device.items() if d == device and other != backend
        )

    def _advance(self) -> None:
        now = self._clock()
        elapsed, self._since = now - self._since, now
        if elapsed <= 0:
            return
        busy: dict[str, int] = {}  # device -> backends with requests in flight
        for backend in self._counts.busy():
            self._load[backend] = self._load.get(backend, 0.0) + self._counts[backend] * elapsed
            device = self._device.get(backend)
            if device is not None:
                busy[device] = busy.get(device, 0) + 1
        if not busy:
            return
        for backend in self._device:
            own = 1 if self._counts[backend] > 0 else 0
            if busy.get(self._device[backend], 0) - own > 0:
                self._shared[backend] = self._shared.get(backend, 0.0) + elapsed


class Accounting:
    """The books of every dispatched request, over one registry."""

    def __init__(
        self,
        registry: Registry,
        observers: Sequence[Observer] = (),
        on_dispatch: Sequence[DispatchListener] = (),
    ) -> None:
        self.registry = registry
        self.observers = list(observers)
        self.on_dispatch = list(on_dispatch)
        devices = {name: state.config.device for name, state in registry.backends.items()}
        self.device_time = DeviceTime(registry.inflight, devices)
        self.progress: ProgressBook | None = None  # requests in flight as far as they have gone

    def track(self, progress: ProgressBook) -> None:
        """Note every attempt in `progress` from dispatch to its end, its device time read from here."""
        self.progress = progress
        progress.shared_seconds = self.device_time.shared_seconds

    def dispatching(self, exchange: Exchange, backend: str) -> Marks:
        """The request is about to be sent to `backend`, where it is already counted: note the load it
        meets and, on its first attempt, the gateway's own time so far (queueing excluded); tell the
        dispatch listeners the first time it goes upstream. Returns the device-time marks to hand back to
        `answered`."""
        record, job = exchange.record, exchange.job
        marks = self.device_time.marks(backend)
        record.inflight_at_dispatch = self.registry.backends[backend].inflight
        record.device_inflight_at_dispatch = device_load(self.registry, backend)
        if self.progress is not None:
            exchange.progress = self.progress.started(
                backend,
                job.profile,
                record.inflight_at_dispatch,
                job.stream,
                marks.shared_s,
                job.prompt_tokens,
            )
        if record.attempts == 1:
            record.overhead = monotonic() - job.started - record.queue_wait
        if not exchange.dispatched:
            exchange.dispatched = True
            for listener in self.on_dispatch:
                try:
                    listener(job, backend)
                except Exception:  # a broken listener must not break the request path
                    log.exception("dispatch listener %r failed", listener)
        return marks

    def answered(self, exchange: Exchange, backend: str, at_dispatch: Marks) -> None:
        """The attempt on `backend` is over (answered, failed or cancelled)."""
        now = self.device_time.marks(backend)
        exchange.record.device_shared_s = now.shared_s - at_dispatch.shared_s
        exchange.record.load_s = now.load_s - at_dispatch.load_s
        if self.progress is not None and exchange.progress is not None:
            self.progress.ended(exchange.progress)
            exchange.progress = None

    def note_success(self, backend: str) -> None:
        self.registry.note_success(backend)  # passive health: it answers, so it is alive

    def note_unserved(self, backend: str, endpoint: str, path: str) -> None:
        if self.registry.note_unserved(backend, endpoint):
            log.warning(
                "backend %s has no route for POST %s: no more %s requests go to it", backend, path, endpoint
            )

    def note_down(self, backend: str, why: str) -> None:
        self.registry.note_down(backend, why)  # the connection was refused: nothing listens, it is down

    def finish(self, record: RequestRecord) -> None:
        for observer in self.observers:
            try:
                observer(record)
            except Exception:  # a broken recorder must not break the request path
                log.exception("request observer %r failed", observer)


def device_load(registry: Registry, backend: str) -> int:
    """Requests in flight on `backend`'s device (on the backend alone when it has no device)."""
    state = registry.backends[backend]
    device = state.config.device
    if device is None:
        return state.inflight
    return sum(s.inflight for s in registry.backends.values() if s.config.device == device)


def take_usage(record: RequestRecord, answer: Any) -> None:
    """The token counts of a whole answer's `usage` (the parsed answer), when it has one."""
    usage = answer.get("usage") if isinstance(answer, dict) else None
    counts = usage_counts(usage)  # chat's spelling, or Messages' and Responses' input/output tokens
    if counts is not None:
        record.prompt_tokens, record.output_tokens = counts


def take_stream_measures(record: RequestRecord, meter: SseMeter, started: float) -> None:
    """What a relayed stream measured: tokens, TTFT, inter-token gaps and TPOT, an upstream error."""
    end = monotonic()
    if meter.error is not None and record.error is None:
        record.error = str(meter.error.get("message", "upstream error frame"))
    if meter.usage is not None:
        record.output_tokens = meter.usage.get("completion_tokens")
        record.prompt_tokens = meter.usage.get("prompt_tokens")
    elif meter.content_frames:
        record.output_tokens = meter.content_frames  # a lower bound when the engine sends no usage
    if meter.first_token_at is not None:
        record.ttft = meter.first_token_at - started
        record.itl = meter.itl
        tokens = record.output_tokens or 0
        if tokens > 1:
            # TPOT is the decode time per token after the first; never TTFT divided by tokens.
            record.tpot = (end - meter.first_token_at) / (tokens - 1)
