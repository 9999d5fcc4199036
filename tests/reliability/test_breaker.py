"""Circuit breaker: what opens it, what never does, and the half-open probe cycle (time is injected)."""

from __future__ import annotations

import pytest

from gateway.proxy.breaker import (
    CLIENT_DISCONNECTED,
    BreakerConfig,
    Breakers,
    CircuitBreaker,
    Outcome,
    outcome_of,
)


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def make(clock: FakeClock, **overrides: float) -> CircuitBreaker:
    config = BreakerConfig(**{"failure_threshold": 5, "cooldown_seconds": 10.0, **overrides})
    return CircuitBreaker(config, clock)


def feed(breaker: CircuitBreaker, outcome: Outcome, times: int = 1) -> None:
    for _ in range(times):
        ticket = breaker.allow()
        assert ticket is not None, "breaker refused a request it was expected to let through"
        breaker.record(ticket, outcome)


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        (200, None, "success"),
        (None, "connect", "failure"),
        (None, "timeout", "failure"),
        (None, CLIENT_DISCONNECTED, "client_error"),
        (500, None, "failure"),
        (502, "bad gateway", "failure"),
        (503, "ServiceUnavailableError", "failure"),
        (400, "This model's maximum context length is 8192 tokens.", "client_error"),
        (404, None, "client_error"),
        (422, None, "client_error"),
        (429, None, "backpressure"),
        (503, "The engine is currently busy and cannot accept new requests.", "backpressure"),
        (503, "The engine has reached its prefill token backlog limit.", "backpressure"),
        (503, "no slot available", "backpressure"),
        (503, "Loading model", "backpressure"),
        (500, "image input is not supported - hint: you may need to provide the mmproj", "client_error"),
    ],
)
def test_outcome_of_classifies_status_and_error(status: int | None, error: str | None, expected: str) -> None:
    assert outcome_of(status, error) == expected


def test_consecutive_5xx_storm_opens_the_breaker() -> None:
    clock = FakeClock()
    breaker = make(clock)
    feed(breaker, outcome_of(500, None), times=4)
    assert breaker.state == "closed"
    feed(breaker, outcome_of(502, None))
    assert breaker.state == "open"
    assert breaker.allow() is None
    assert breaker.snapshot().last_failure == "5 consecutive failures"


def test_a_success_resets_the_consecutive_count() -> None:
    breaker = make(FakeClock())
    for _ in range(3):
        feed(breaker, "failure", times=4)
        feed(breaker, "success")
    assert breaker.state == "closed"


def test_failure_rate_over_the_window_opens_the_breaker() -> None:
    clock = FakeClock()
    breaker = make(clock, failure_threshold=100, min_window_requests=20, failure_rate_threshold=0.5)
    for _ in range(10):  # alternate: never 2 failures in a row, but a 50% failure rate
        feed(breaker, "success")
        feed(breaker, "failure")
        clock.advance(0.5)
    assert breaker.state == "open"
    assert "failure rate" in breaker.snapshot().last_failure


def test_failures_older_than_the_window_are_forgotten() -> None:
    clock = FakeClock()
    breaker = make(clock, failure_threshold=100, window_seconds=10.0, min_window_requests=4)
    feed(breaker, "success")
    feed(breaker, "failure", times=2)
    clock.advance(30.0)
    feed(breaker, "success", times=3)
    feed(breaker, "failure")
    assert breaker.state == "closed"
    state = breaker.snapshot()
    assert (state.window_successes, state.window_failures) == (3, 1)


@pytest.mark.parametrize("status", [400, 401, 404, 413, 422])
def test_a_4xx_storm_never_opens_the_breaker(status: int) -> None:
    breaker = make(FakeClock(), min_window_requests=1)
    feed(breaker, outcome_of(status, "context length exceeded"), times=200)
    assert breaker.state == "closed"
    assert breaker.snapshot().consecutive_failures == 0


@pytest.mark.parametrize(
    ("status", "error"), [(429, None), (503, "The engine is currently busy"), (503, "no slot available")]
)
def test_back_pressure_never_opens_the_breaker(status: int, error: str | None) -> None:
    breaker = make(FakeClock(), min_window_requests=1)
    feed(breaker, outcome_of(status, error), times=200)
    assert breaker.state == "closed"


def test_back_pressure_between_failures_does_not_reset_them() -> None:
    breaker = make(FakeClock())
    for _ in range(4):
        feed(breaker, "failure")
        feed(breaker, "backpressure")
    feed(breaker, "failure")
    assert breaker.state == "open"


def open_breaker(clock: FakeClock, **overrides: float) -> CircuitBreaker:
    breaker = make(clock, **overrides)
    feed(breaker, "failure", times=5)
    assert breaker.state == "open"
    return breaker


def test_open_turns_half_open_after_the_cooldown_and_lets_a_bounded_number_of_probes() -> None:
    clock = FakeClock()
    breaker = open_breaker(clock, half_open_probes=2)
    clock.advance(9.9)
    assert breaker.allow() is None
    clock.advance(0.1)
    assert breaker.state == "half_open"
    first, second = breaker.allow(), breaker.allow()
    assert first is not None and second is not None and first.probe
    assert breaker.allow() is None, "a third concurrent probe must wait"
    assert breaker.available() is False


def test_half_open_probe_success_closes() -> None:
    clock = FakeClock()
    breaker = open_breaker(clock)
    clock.advance(10.0)
    ticket = breaker.allow()
    assert ticket is not None
    breaker.record(ticket, "success")
    assert breaker.state == "closed"
    feed(breaker, "success", times=3)


def test_half_open_probe_failure_reopens_with_backoff_up_to_the_cap() -> None:
    clock = FakeClock()
    breaker = open_breaker(clock, backoff_factor=2.0, max_cooldown_seconds=30.0)
    cooldowns = []
    for _ in range(4):
        clock.advance(breaker.snapshot().retry_in_seconds)
        ticket = breaker.allow()
        assert ticket is not None and ticket.probe
        breaker.record(ticket, "failure")
        assert breaker.state == "open"
        cooldowns.append(breaker.snapshot().cooldown_seconds)
    assert cooldowns == [20.0, 30.0, 30.0, 30.0]


def test_closing_resets_the_backoff() -> None:
    clock = FakeClock()
    breaker = open_breaker(clock)
    clock.advance(10.0)
    probe = breaker.allow()
    assert probe is not None
    breaker.record(probe, "failure")  # cooldown now 20
    clock.advance(20.0)
    probe = breaker.allow()
    assert probe is not None
    breaker.record(probe, "success")
    assert breaker.snapshot().cooldown_seconds == 10.0


def test_back_pressure_on_a_probe_frees_the_probe_place_and_stays_half_open() -> None:
    clock = FakeClock()
    breaker = open_breaker(clock)
    clock.advance(10.0)
    probe = breaker.allow()
    assert probe is not None and breaker.allow() is None
    breaker.record(probe, "backpressure")
    assert breaker.state == "half_open"
    assert breaker.allow() is not None


def test_a_slow_request_from_before_the_open_cannot_close_the_breaker() -> None:
    clock = FakeClock()
    breaker = make(clock)
    slow = breaker.allow()
    assert slow is not None
    feed(breaker, "failure", times=5)
    clock.advance(10.0)
    assert breaker.state == "half_open"
    breaker.record(slow, "success")
    assert breaker.state == "half_open"
    assert breaker.snapshot().probes_in_flight == 0


def test_snapshot_is_plain_data_with_the_time_left_while_open() -> None:
    clock = FakeClock()
    breaker = open_breaker(clock)
    clock.advance(4.0)
    state = breaker.snapshot()
    assert state.state == "open" and state.retry_in_seconds == pytest.approx(6.0)
    assert state.times_opened == 1 and state.consecutive_failures == 5


def test_breakers_follow_the_backend_list_and_keep_existing_state() -> None:
    clock = FakeClock()
    breakers = Breakers(["a", "b"], BreakerConfig(failure_threshold=1), clock)
    feed(breakers["a"], "failure")
    assert breakers.is_open("a") and not breakers.is_open("b")
    breakers.sync(["a", "c"])
    assert "b" not in breakers and "c" in breakers
    assert breakers.is_open("a")
    assert set(breakers.snapshot()) == {"a", "c"}
