"""The hang watch on its own (time injected, checks run by hand): what silence is allowed, when a backend
is suspected and when stalled, what the engine's own progress clears, what is cut there, and that it is
back at its first byte."""

from __future__ import annotations

import asyncio

import pytest

from gateway.backends.registry import Registry, Status
from gateway.proxy.stall import StallCounts, StallWatch, Watched
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


def finished_stream(
    watch: StallWatch, backend: str, ttft_s: float, gaps: list[float], body: int = 100
) -> None:
    watched = watch.enter(backend, True, body)
    meter = SseMeter(strip_usage=False)
    meter.first_token_at = watched.sent + ttft_s
    meter.itl = gaps
    meter.content_frames = len(gaps) + 1
    watched.meter = meter
    watch.leave(watched)


async def test_allowed_silence_is_the_floor_until_measured_then_a_multiple_of_p95_gaps_never_ttft() -> None:
    watch, _ = make(FakeClock())
    assert watch.allowed_silence("a") == 3.0
    for _ in range(20):
        finished_stream(watch, "a", ttft_s=20.0, gaps=[0.05] * 10)
    # Slow first tokens in its history widen nothing: a wedged engine is found as fast as ever.
    assert watch.allowed_silence("a") == 3.0
    for _ in range(20):
        finished_stream(watch, "a", ttft_s=0.5, gaps=[1.0] * 10)
    assert watch.allowed_silence("a") == pytest.approx(4.0)  # 4 x p95 gap (1 s) beats the 3 s floor
    assert watch.allowed_silence("b") == 3.0  # per backend


async def test_the_first_content_allowance_is_the_prompt_and_the_queue_ahead_at_the_prefill_rate() -> None:
    watch, _ = make(FakeClock(), prefill_tokens_per_s=1000.0, step_tokens=16_384)
    long = watch.enter("a", True, 400_000)  # ~100k tokens
    short = watch.enter("a", True, 40_000)  # ~10k tokens, behind it
    async with asyncio.timeout(None) as one, asyncio.timeout(None) as other:
        long.scope, short.scope = one, other
        assert watch.first_content_allowed(long) == pytest.approx(3.0 + 100.0)
        assert watch.first_content_allowed(short) == pytest.approx(3.0 + 110.0)  # the queue ahead too
        # Without any progress, one engine step of what waits (its per-step token budget).
        assert watch.allowed_silence("a") == pytest.approx(3.0 + 16.384)
        long.scope = short.scope = None
    assert watch.allowed_silence("a") == 3.0  # once answered, their prompts are no longer waiting


async def test_a_measured_prefill_rate_replaces_the_prior_with_a_margin() -> None:
    watch, _ = make(FakeClock(), prefill_tokens_per_s=1000.0)
    for _ in range(5):
        finished_stream(watch, "a", ttft_s=1.0, gaps=[0.05], body=40_000)  # 10k tokens/s: faster
        finished_stream(watch, "b", ttft_s=100.0, gaps=[0.05], body=40_000)  # 100 tokens/s: slower
    a, b = watch.enter("a", True, 40_000), watch.enter("b", True, 40_000)
    assert watch.first_content_allowed(a) == pytest.approx(3.0 + 2.0)  # 10k tokens/s, at half speed
    assert watch.first_content_allowed(b) == pytest.approx(3.0 + 200.0)  # 100 tokens/s, at half speed


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
    assert watch.counts()["a"] == StallCounts(suspected=1, confirmed=1, cleared=0, moved=1, ended=0)
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
    watch.enter("a", True, 100).committed = True  # a stream under way
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
    assert watch.counts()["a"] == StallCounts(suspected=1, confirmed=1, cleared=0, moved=1, ended=0)
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


async def test_whole_answers_on_an_engine_whose_counters_stand_still_are_moved_within_seconds() -> None:
    """A wedged engine: its HTTP server answers probes and /metrics, its counters never move."""
    clock = FakeClock()
    watch, registry = make(clock)
    waiting = watch.enter("a", False, 100)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as scope:
            waiting.scope = scope
            for _ in range(7):
                clock.t += 1.0
                watch.control_answered("a")
                watch.engine_progress("a", moved=False)
                watch.check()
                # Past the 3 s floor, but its server answers: busy more likely than hung, up to 7 s.
                assert registry.backends["a"].stalled_since is None
            clock.t += 1.0
            watch.engine_progress("a", moved=False)
            watch.check()
            assert registry.backends["a"].stalled_since is not None
            assert "counters stand still" in registry.backends["a"].stall_detail
            await asyncio.sleep(1)  # the cut lands here, at once
    assert waiting.cut is not None
    assert watch.counts()["a"] == StallCounts(suspected=1, confirmed=1, cleared=0, moved=1, ended=0)


async def test_a_long_whole_answer_on_an_engine_whose_counters_move_is_never_cut() -> None:
    clock = FakeClock()
    watch, registry = make(clock)
    watch.enter("a", False, 100)
    for _ in range(600):  # ten minutes of decoding, its counters read each second
        clock.t += 1.0
        watch.engine_progress("a", moved=True)
        watch.check()
        assert registry.backends["a"].stalled_since is None
    assert watch.counts()["a"].suspected == 0


async def test_a_suspicion_is_cleared_by_the_engines_progress_and_confirmed_only_once_it_stops() -> None:
    clock = FakeClock()
    watch, registry = make(clock, prefill_tokens_per_s=1000.0)
    stream = watch.enter("a", True, 100)
    stream.committed = True  # under way, then silent: the long prefill of another request holds its steps
    long = watch.enter("a", True, 40_000)  # ~10k tokens: up to 10 s of prefill, one step, nothing moves
    async with asyncio.timeout(None) as scope:
        long.scope = scope
        clock.t += 3.5
        watch.check()
        assert watch.details("a")["suspected"] and registry.backends["a"].stalled_since is None
        watch.engine_progress("a", moved=True)  # its KV cache grew: a chunk of that prefill was computed
        assert not watch.details("a")["suspected"]
        assert watch.counts()["a"] == StallCounts(suspected=1, confirmed=0, cleared=1, moved=0, ended=0)
        clock.t += 12.0  # suspected again, but within one step of what waits (3 s + 10 s)
        watch.check()
        assert watch.details("a")["suspected"] and registry.backends["a"].stalled_since is None
        clock.t += 1.5  # 13.5 s without any progress: more than a step explains
        watch.check()
        assert registry.backends["a"].stalled_since is not None
        assert watch.counts()["a"] == StallCounts(suspected=2, confirmed=1, cleared=1, moved=1, ended=0)
        long.scope = None


async def test_when_every_candidate_is_suspected_none_is_confirmed_until_one_answers() -> None:
    """Both engines of the pool silent at once (a busy host): failing over in a circle serves nobody, so
    the requests wait where they are; once one engine answers, the other may be confirmed."""
    clock = FakeClock()
    watch, registry = make(clock)
    a, b = watch.enter("a", True, 100), watch.enter("b", True, 100)
    a.committed = b.committed = True
    a.meter = SseMeter(strip_usage=False)
    b.meter = SseMeter(strip_usage=False)
    for _ in range(40):
        clock.t += 0.5
        watch.check()
        assert registry.backends["a"].stalled_since is None
        assert registry.backends["b"].stalled_since is None
    b.meter.feed(CONTENT)  # b answers
    watch.check()
    assert registry.backends["a"].stalled_since is not None
    assert registry.backends["b"].stalled_since is None


async def test_a_request_no_other_backend_of_its_pool_could_take_stays_on_a_stalled_backend() -> None:
    """Backend a serves two pools, b only the first: a stall found on a moves the shared pool's request
    to b, and leaves the request pinned to a's own pool where it is, to be served once a answers."""
    clock = FakeClock()
    settings = Settings(
        backends=[{"name": n, "url": f"http://{n}:8000"} for n in ("a", "b")],
        pools=[{"model": "m", "backends": ["a", "b"]}, {"model": "solo", "backends": ["a"]}],
    )
    registry = Registry(settings, clock=clock)
    for name in ("a", "b"):
        registry.set_status(name, Status.READY)
    stall = StallSettings(min_silence_s=3.0, multiple=4.0, check_interval_s=3600.0)
    watch = StallWatch(stall, registry)
    shared, pinned = watch.enter("a", True, 100, ("a", "b")), watch.enter("a", True, 100, ("a",))
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as shared_scope:
            shared.scope = shared_scope
            async with asyncio.timeout(None) as pinned_scope:
                pinned.scope = pinned_scope
                for _ in range(40):
                    clock.t += 0.25
                    watch.check()
                assert registry.backends["a"].stalled_since is not None
                await asyncio.sleep(0.05)  # the shared request's cut lands here
    assert shared.cut is not None
    assert pinned.cut is None and not pinned_scope.expired()


async def test_a_backend_whose_waiting_requests_could_go_nowhere_else_is_not_confirmed() -> None:
    clock = FakeClock()
    watch, registry = make(clock)
    pinned = watch.enter("a", True, 100, ("a",))
    async with asyncio.timeout(None) as scope:
        pinned.scope = scope
        for _ in range(40):
            clock.t += 0.25
            watch.check()
        assert watch.details("a")["suspected"]
        assert registry.backends["a"].stalled_since is None
        pinned.scope = None
