"""The warm-up refusal: 503 `backends_warming` with the first backend's time left as Retry-After, worded
as a warm-up (never as capacity), and only when every candidate is warming."""

from __future__ import annotations

import pytest

from gateway.backends.registry import Registry, Status
from gateway.backends.warmup import Warming, Warmups
from gateway.proxy.reliability import Reliability, warming_refused
from gateway.settings import Settings

QUEUE_WORDS = ("room", "capacity", "busy", "full")


def view(expected_s: float, elapsed_s: float, restarting: bool = False) -> Warming:
    return Warming("a", 0.0, expected_s, "learned", elapsed_s, restarting)


@pytest.mark.parametrize(
    ("expected_s", "elapsed_s", "retry_after", "when"),
    [
        (1200.0, 180.0, 1020, "is expected ready in ~17 min"),
        (60.0, 0.6, 60, "is expected ready in ~60 s"),  # 59.4 s left: rounded up, as Retry-After is
        (7200.0, 0.0, 7200, "is expected ready in ~2.0 h"),
        (600.0, 720.0, 1, "was expected ready 2 min ago and may be ready any moment"),
    ],
)
def test_the_refusal_carries_the_time_left_as_retry_after_and_in_words(
    expected_s: float, elapsed_s: float, retry_after: int, when: str
) -> None:
    refused = warming_refused("qwen", view(expected_s, elapsed_s))
    assert (refused.status, refused.code, refused.retry_after) == (503, "backends_warming", retry_after)
    assert refused.message == (
        f"all backends for model qwen are warming up; the first (a) {when} (Retry-After: {retry_after} s)"
    )
    assert not any(word in refused.message for word in QUEUE_WORDS)


def test_a_prediction_ahead_of_time_counts_the_wait_and_a_restart_is_named() -> None:
    refused = warming_refused("qwen", view(600.0, 100.0, restarting=True), ahead_s=30.0)
    assert refused.retry_after == 470
    assert "are warming up or restarting" in refused.message


def reliability(warming: dict[str, Status]) -> tuple[Reliability, Registry]:
    settings = Settings(
        backends=[{"name": n, "url": "http://127.0.0.1:1", "warmup_s": 300.0} for n in warming],
        pools=[{"model": "m", "backends": list(warming)}],
    )
    registry = Registry(settings)
    warmups = Warmups(registry, None)
    registry.listeners.append(warmups.on_status)
    for name, status in warming.items():
        registry.set_status(name, status)
    return Reliability(settings, warmups), registry


def test_only_a_pool_whose_every_candidate_is_warming_is_refused_as_warming() -> None:
    warming, _ = reliability({"a": Status.STARTING, "b": Status.STARTING})
    refused = warming.warming_refusal("m", ["a", "b"])
    assert refused is not None and refused.code == "backends_warming" and refused.retry_after == 300
    mixed, _ = reliability({"a": Status.STARTING, "b": Status.READY})
    assert mixed.warming_refusal("m", ["a", "b"]) is None
    assert mixed.warming_refusal("m", ["a"]) is not None


def test_the_time_a_client_is_told_to_come_back_is_kept_as_a_promise_on_that_backend() -> None:
    warming, registry = reliability({"a": Status.STARTING, "b": Status.STARTING})
    first = warming.warmups.first_ready(["a", "b"])
    assert first is not None and registry.promised_until(first.backend) == float("-inf")
    warming_refused("m", first)  # what explain predicts tells no client anything: no promise
    assert registry.promised_until(first.backend) == float("-inf")
    refused = warming.warming_refusal("m", ["a", "b"])
    assert refused is not None
    told = registry.promised_until(first.backend)
    assert told == pytest.approx(registry.clock() + refused.retry_after, abs=0.5)


def test_the_warming_wait_defaults_to_the_queue_deadline() -> None:
    settings = Settings(queue={"timeout_s": 12.0})
    registry = Registry(settings)
    assert Reliability(settings, Warmups(registry, None)).warming_wait_s == 12.0
    settings = Settings(queue={"timeout_s": 12.0, "warming_wait_s": 90.0})
    assert Reliability(settings, Warmups(registry, None)).warming_wait_s == 90.0


def test_backend_details_show_the_warm_up_next_to_breaker_and_slots() -> None:
    warming, _ = reliability({"a": Status.STARTING})
    details = warming.details("a")
    assert {"breaker", "slots", "warming_since", "expected_ready_at", "eta_s"} <= set(details)
    assert details["warmup_expected_s"] == 300.0 and details["warmup_source"] == "configured"
    assert 299.0 < details["eta_s"] <= 300.0
