"""Circuit breaker per backend: stop sending traffic to a backend that keeps failing, probe it after a
cool-down, and let it back in once a probe succeeds.

Only real backend faults count: transport errors, timeouts and 5xx. A 4xx is the client's fault, and a 429
or a "busy" 503 is the engine saying "not now" (back-pressure), so neither ever opens the breaker.

States: closed -> open (N consecutive failures, or a failure rate over a time window) -> half-open after
the cool-down (a bounded number of probe requests pass) -> closed on a probe success, or open again with
the cool-down multiplied by `backoff_factor` (capped) on a probe failure.

Time is read from an injected clock (`Callable[[], float]`, monotonic seconds) so tests are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from gateway.clock import monotonic

Outcome = Literal["success", "failure", "backpressure", "client_error"]
StateName = Literal["closed", "open", "half_open"]
Clock = Callable[[], float]

# Markers in a 503 (or 429) error message that mean "busy or loading, try later", not "broken".
# vLLM admission control: "The engine is currently busy ..." / "... prefill token backlog limit ...";
# llama.cpp: "no slot available", "Loading model"; SGLang and others: queue full / overloaded wording.
_BACKPRESSURE_MARKERS = ("busy", "no slot available", "loading model", "queue", "overloaded", "backlog")

# llama.cpp answers an unsupported modality with a 500 although it is the request's fault.
_CLIENT_FAULT_500_MARKERS = ("input is not supported",)

# The client went away: says nothing about the backend.
CLIENT_DISCONNECTED = "client_disconnected"


def outcome_of(status: int | None, error: str | None) -> Outcome:
    """Classify one upstream attempt.

    `status` is the upstream HTTP status, or None when no response arrived. `error` is, without a status,
    the transport error kind (e.g. "connect", "timeout") or CLIENT_DISCONNECTED; with a status, the
    upstream error message or body text if any (used to tell a busy 503 from a broken one).
    """
    text = (error or "").lower()
    if status is None:
        return "client_error" if text == CLIENT_DISCONNECTED else "failure"
    if status == 429:
        return "backpressure"
    if status == 503 and any(marker in text for marker in _BACKPRESSURE_MARKERS):
        return "backpressure"
    if status == 500 and any(marker in text for marker in _CLIENT_FAULT_500_MARKERS):
        return "client_error"
    if 400 <= status < 500:
        return "client_error"
    if status >= 500:
        return "failure"
    return "success"


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    failure_threshold: int = 5  # consecutive failures that open the breaker
    window_seconds: float = 30.0  # failure-rate window
    window_buckets: int = 10  # the window is kept as this many time buckets: memory stays flat
    min_window_requests: int = 20  # below this many outcomes in the window the rate is not trusted
    failure_rate_threshold: float = 0.5  # failures / (failures + successes) that opens the breaker
    cooldown_seconds: float = 5.0  # first open period
    max_cooldown_seconds: float = 120.0  # cap of the backoff
    backoff_factor: float = 2.0  # cool-down multiplier for each failed half-open probe
    half_open_probes: int = 1  # requests let through at once while half-open

    def __post_init__(self) -> None:
        if self.failure_threshold < 1 or self.half_open_probes < 1 or self.window_buckets < 1:
            raise ValueError("failure_threshold, half_open_probes and window_buckets must be >= 1")
        if not 0.0 < self.failure_rate_threshold <= 1.0:
            raise ValueError("failure_rate_threshold must be in (0, 1]")
        if self.window_seconds <= 0 or self.cooldown_seconds <= 0 or self.backoff_factor < 1.0:
            raise ValueError("window_seconds and cooldown_seconds must be > 0, backoff_factor >= 1")


@dataclass(frozen=True, slots=True)
class BreakerState:
    """One breaker as plain data, for metrics and /gateway/backends."""

    state: StateName
    consecutive_failures: int
    window_successes: int
    window_failures: int
    cooldown_seconds: float  # the cool-down of the current (or next) open period
    retry_in_seconds: float  # time left before an open breaker lets a probe through; 0 otherwise
    probes_in_flight: int
    times_opened: int
    last_failure: str  # why it last opened, e.g. "5 consecutive failures"


class _RateWindow:
    """Success/failure counts over the last `seconds`, in fixed time buckets (bounded memory)."""

    def __init__(self, seconds: float, buckets: int) -> None:
        self._width = seconds / buckets
        self._counts: list[list[int]] = [[0, 0] for _ in range(buckets)]  # [successes, failures]
        self._slots: list[int] = [-1] * buckets  # which time slot each bucket currently holds

    def add(self, now: float, failed: bool) -> None:
        slot = int(now // self._width)
        i = slot % len(self._slots)
        if self._slots[i] != slot:
            self._slots[i] = slot
            self._counts[i] = [0, 0]
        self._counts[i][1 if failed else 0] += 1

    def totals(self, now: float) -> tuple[int, int]:
        current = int(now // self._width)
        oldest = current - len(self._slots) + 1
        successes = failures = 0
        for slot, (ok, bad) in zip(self._slots, self._counts, strict=True):
            if oldest <= slot <= current:
                successes += ok
                failures += bad
        return successes, failures

    def clear(self) -> None:
        self._slots = [-1] * len(self._slots)


@dataclass(frozen=True, slots=True)
class Ticket:
    """Permission to send one request, handed back to `record` with its outcome. The epoch ties the outcome
    to the breaker state it was allowed in, so a slow request allowed before the breaker opened cannot
    close it again or pass for a half-open probe."""

    epoch: int
    probe: bool


class CircuitBreaker:
    """The breaker of one backend. Not thread-safe; meant for one event loop."""

    def __init__(self, config: BreakerConfig | None = None, clock: Clock = monotonic) -> None:
        self.config = config or BreakerConfig()
        self._clock = clock
        self._state: StateName = "closed"
        self._epoch = 0  # bumped on every state change
        self._consecutive = 0
        self._window = _RateWindow(self.config.window_seconds, self.config.window_buckets)
        self._cooldown = self.config.cooldown_seconds
        self._open_until = 0.0
        self._probes = 0
        self._times_opened = 0
        self._reason = ""
        self._succeeded_at: float | None = None  # the last success's time

    @property
    def state(self) -> StateName:
        self._advance(self._clock())
        return self._state

    def available(self) -> bool:
        """Could a request be sent now? No side effect: for routing filters."""
        state = self.state
        return state == "closed" or (state == "half_open" and self._probes < self.config.half_open_probes)

    def allow(self) -> Ticket | None:
        """Take permission to send one request, or None. While half-open this takes one of the probe
        places; every ticket must be handed back to `record` exactly once (dispatch does it in `finally`)."""
        if not self.available():
            return None
        probe = self._state == "half_open"
        if probe:
            self._probes += 1
        return Ticket(self._epoch, probe)

    def record(self, ticket: Ticket, outcome: Outcome) -> None:
        """Feed the outcome of one allowed request."""
        now = self._clock()
        self._advance(now)
        if ticket.epoch != self._epoch:
            return  # allowed under an earlier state: already accounted for by the transition
        if ticket.probe:
            self._probes -= 1
        if outcome == "success":
            self._on_success(now, ticket.probe)
        elif outcome == "failure":
            self._on_failure(now, ticket.probe)
        # back-pressure and client errors say nothing about the backend's health: no change.

    def snapshot(self) -> BreakerState:
        now = self._clock()
        self._advance(now)
        successes, failures = self._window.totals(now)
        return BreakerState(
            state=self._state,
            consecutive_failures=self._consecutive,
            window_successes=successes,
            window_failures=failures,
            cooldown_seconds=self._cooldown,
            retry_in_seconds=max(0.0, self._open_until - now) if self._state == "open" else 0.0,
            probes_in_flight=self._probes,
            times_opened=self._times_opened,
            last_failure=self._reason,
        )

    def reset(self) -> None:
        """Closed, with no history: for a backend that came back (a restarted process is a new one, the
        old one's failures say nothing about it). Tickets taken before are from an older epoch."""
        if self._state != "closed" or self._consecutive:
            self._close()

    def _advance(self, now: float) -> None:
        if self._state == "open" and now >= self._open_until:
            self._set_state("half_open")

    def _set_state(self, state: StateName) -> None:
        self._state = state
        self._epoch += 1
        self._probes = 0

    def served_recently(self) -> bool:
        """A request succeeded within the rate window: the backend is alive and serving."""
        at = self._succeeded_at
        return at is not None and self._clock() - at <= self.config.window_seconds

    def _on_success(self, now: float, probe: bool) -> None:
        self._succeeded_at = now
        self._consecutive = 0
        if probe:
            self._close()
        else:
            self._window.add(now, failed=False)

    def _on_failure(self, now: float, probe: bool) -> None:
        self._consecutive += 1
        if probe:
            # Still broken: wait longer before the next probe.
            longer = self._cooldown * self.config.backoff_factor
            self._cooldown = min(longer, self.config.max_cooldown_seconds)
            self._open(now, "half-open probe failed")
            return
        self._window.add(now, failed=True)
        if self._consecutive >= self.config.failure_threshold:
            self._open(now, f"{self._consecutive} consecutive failures")
            return
        successes, failures = self._window.totals(now)
        total = successes + failures
        enough = total >= self.config.min_window_requests
        if enough and failures / total >= self.config.failure_rate_threshold:
            self._open(now, f"failure rate {failures}/{total} over {self.config.window_seconds:g}s")

    def _open(self, now: float, reason: str) -> None:
        self._set_state("open")
        self._open_until = now + self._cooldown
        self._times_opened += 1
        self._reason = reason

    def _close(self) -> None:
        self._set_state("closed")
        self._consecutive = 0
        self._cooldown = self.config.cooldown_seconds
        self._window.clear()


class Breakers:
    """The breakers of all configured backends, made by the composition root (one per backend name)."""

    def __init__(
        self, names: Iterable[str], config: BreakerConfig | None = None, clock: Clock = monotonic
    ) -> None:
        self._config = config or BreakerConfig()
        self._clock = clock
        self._by_name: dict[str, CircuitBreaker] = {}
        self.sync(names)

    def sync(self, names: Iterable[str]) -> None:
        """Follow a configuration change: keep the breakers of backends still configured, add new ones and
        drop removed ones, so the map never outgrows the backend list."""
        kept = self._by_name
        self._by_name = {name: kept.get(name) or CircuitBreaker(self._config, self._clock) for name in names}

    def __getitem__(self, name: str) -> CircuitBreaker:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def is_open(self, name: str) -> bool:
        """For BackendSnapshot.breaker_open: True while the backend must not get a request."""
        return not self._by_name[name].available()

    def snapshot(self) -> dict[str, BreakerState]:
        return {name: breaker.snapshot() for name, breaker in self._by_name.items()}
