"""The hang watch on its own (time injected, checks run by hand): what silence is allowed, when a backend
is stalled, what is cut there, and that it is back at its first byte."""

from __future__ import annotations

import asyncio

import pytest

from gateway.backends.registry import Registry, Status
from gateway.proxy.stall import StallWatch, Watched
from gateway.proxy.stream import SseMeter
from gateway.settings import Settings, StallSettings

CONTENT = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(clock: FakeClock, **config: float | bool) -> tuple[StallWatch, Registry]:
    settings = Settings(
        backends=[{"name": n, "url": f"http://{n}:8000"} for n in ("a", "b")],
        pools=[{"model": "m", "backends": ["a", "b"]}],
    )
    registry = Registry(settings, clock=clock)
    for name in ("a", "b"):
        registry.set_status(name, Status.READY)
    # A check interval far beyond the test: checks run only when the test calls them.
    defaults = {"min_silence_s": 3.0, "multiple": 4.0, "check_interval_s": 3600.0}
    stall = StallSettings.model_validate({**defaults, **config})
    return StallWatch(stall, registry), registry


def finished_stream(watch: StallWatch, backend: str, ttft_s: float, gaps: list[float]) -> None:
    watched = watch.enter(backend, True, 100)
    meter = SseMeter(strip_usage=False)
    meter.first_token_at = watched.sent + ttft_s
    meter.itl = gaps
    meter.content_frames = len(gaps) + 1
    watched.meter = meter
    watch.leave(watched)


async def test_allowed_silence_is_the_floor_until_measured_then_a_multiple_of_p95() -> None:
    watch, _ = make(FakeClock())
    assert watch.allowed_silence("a") == 3.0
    for _ in range(20):
        finished_stream(watch, "a", ttft_s=2.0, gaps=[0.05] * 10)
    assert watch.allowed_silence("a") == pytest.approx(8.0)  # 4 x p95 TTFT (2 s) beats the 3 s floor
    assert watch.allowed_silence("b") == 3.0  # per backend


async def test_the_prompts_waiting_for_their_first_content_add_their_prefill() -> None:
    watch, _ = make(FakeClock(), prefill_tokens_per_s=1000.0)
    long = watch.enter("a", True, 400_000)  # ~100k tokens
    short = watch.enter("a", True, 40_000)  # ~10k tokens
    async with asyncio.timeout(None) as one, asyncio.timeout(None) as other:
        long.scope, short.scope = one, other
        assert watch.allowed_silence("a") == pytest.approx(3.0 + 110.0)  # prefilled one after the other
        long.scope = short.scope = None
    assert watch.allowed_silence("a") == 3.0  # once answered, their prompts are no longer waiting


async def test_a_silent_backend_is_stalled_its_waiting_attempt_cut_and_a_byte_brings_it_back() -> None:
    clock = FakeClock()
    watch, registry = make(clock)
    streaming = watch.enter("a", True, 100)
    streaming.meter = SseMeter(strip_usage=False)
    waiting = watch.enter("a", True, 100)
    clock.t += 2.0
    watch.check()
    assert registry.backends["a"].stalled_since is None  # 2 s of silence: within the 3 s allowed
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as scope:
            waiting.scope = scope
            clock.t += 1.5
            watch.check()
            assert registry.backends["a"].stalled_since is not None
            assert registry.snapshots(registry.pools[0])[0].stalled
            await asyncio.sleep(1)  # the cut lands here, at once
    assert waiting.cut is not None and "backend a stalled" in waiting.cut
    assert watch.counts()["a"] == (1, 1, 0)
    watch.leave(waiting)
    streaming.meter.feed(CONTENT)  # a content frame: a sign of life
    watch.check()
    assert registry.backends["a"].stalled_since is None
    assert not registry.snapshots(registry.pools[0])[0].stalled


async def test_whole_answers_alone_are_never_judged_on_silence() -> None:
    clock = FakeClock()
    watch, registry = make(clock)
    watch.enter("a", False, 100)  # a non-streamed request sends nothing until it is done
    clock.t += 60.0
    watch.check()
    assert registry.backends["a"].stalled_since is None


async def test_an_answered_probe_clears_the_mark_and_silence_counts_again_from_then() -> None:
    clock = FakeClock()
    watch, registry = make(clock)
    watch.enter("a", True, 100)
    clock.t += 4.0
    watch.check()
    assert registry.backends["a"].stalled_since is not None
    registry.note_unstalled("a", "answered a readiness probe")
    watch.check()
    assert registry.backends["a"].stalled_since is None
    clock.t += 2.0
    watch.check()
    assert registry.backends["a"].stalled_since is None  # 2 s since the probe's answer
    clock.t += 1.5
    watch.check()
    assert registry.backends["a"].stalled_since is not None


async def test_a_disabled_watch_marks_nothing() -> None:
    clock = FakeClock()
    watch, registry = make(clock, enabled=False)
    watched: Watched = watch.enter("a", True, 100)
    clock.t += 60.0
    watch.check()
    assert registry.backends["a"].stalled_since is None and watched.cut is None


async def test_whole_answers_on_a_backend_whose_control_plane_is_silent_are_moved() -> None:
    clock = FakeClock()
    watch, registry = make(clock)
    waiting = watch.enter("a", False, 100)  # a non-streamed request: nothing comes until it is done
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as scope:
            waiting.scope = scope
            clock.t += 1.0
            watch.control_unanswered("a", 0.8)  # a /metrics scrape timed out
            clock.t += 1.0
            watch.control_unanswered("a", 0.8)  # and the next
            clock.t += 0.5
            watch.check()
            assert registry.backends["a"].stalled_since is None  # 2.5 s: under the 3 s floor
            clock.t += 1.0
            watch.check()
            assert registry.backends["a"].stalled_since is not None
            assert "answers nothing" in registry.backends["a"].stall_detail
            await asyncio.sleep(1)  # the cut lands here, at once
    assert waiting.cut is not None and "backend a stalled" in waiting.cut
    assert watch.counts()["a"] == (1, 1, 0)
    watch.leave(waiting)
    watch.control_answered("a")  # it answers again (SIGCONT): back at once
    assert registry.backends["a"].stalled_since is None


async def test_a_busy_engine_that_answers_its_control_plane_is_never_unresponsive() -> None:
    clock = FakeClock()
    watch, registry = make(clock)
    watch.enter("a", False, 400_000)  # a long prefill, the answer minutes away
    for _ in range(600):  # ten minutes of scrapes each second, one in three slow
        clock.t += 1.0
        if int(clock.t) % 3:
            watch.control_answered("a")
        else:
            watch.control_unanswered("a", 0.8)
        watch.check()
        assert registry.backends["a"].stalled_since is None


async def test_one_slow_scrape_or_an_idle_backend_is_not_unresponsive() -> None:
    clock = FakeClock()
    watch, registry = make(clock)
    watch.control_unanswered("b", 5.0)  # b has nothing in flight: the prober judges it
    watch.enter("a", False, 100)
    watch.control_unanswered("a", 0.8)  # a single slow scrape on a loaded host
    clock.t += 10.0
    watch.enter("b", False, 100)  # b just became busy: its silence counts from now
    watch.check()
    assert registry.backends["a"].stalled_since is None
    assert registry.backends["b"].stalled_since is None
    clock.t += 3.5
    watch.check()
    assert registry.backends["b"].stalled_since is not None  # busy, silent and a probe unanswered
