"""The engine-wide slow-down factor (routing/slowdown/reading.py): robust evidence from requests in flight,
contention that the device share explains not counted, and one profile's shift applied to the cells that
predate it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.records import InFlight, Progress, Sample
from gateway.routing.model.cells import CellModel, build_model
from gateway.routing.model.regime import expect
from gateway.routing.slowdown.reading import (
    MAX_ARRIVALS,
    MIN_FRAMES,
    DecodePace,
    Slowdown,
    decode_pace,
    engine_slowdown,
    live_ratios,
    load_reach,
    pace_change,
    scaled,
    unmeasured_load_change,
)


def stream_samples(itl: float, n: int = 12, shared: bool = False) -> list[Sample]:
    """Finished streams of one profile at loads 1..8; 1.8x slower frames while the neighbour is busy."""
    out = []
    for i in range(n):
        c, z = 1 + i % 8, 1.0 if shared and i % 3 else 0.0
        gap = (itl + 0.001 * c) * (1.0 + 0.8 * z)
        out.append(
            Sample(
                e2e=0.2 + 99 * gap,
                ttft=0.2,
                output_tokens=100,
                prompt_tokens=500,
                concurrency=c,
                mean_itl=gap,
                device_share=z,
            )
        )
    return out


def streaming(gap: float, n: int, c: int = 2, share: float = 0.0) -> list[InFlight]:
    return [
        InFlight("chat", c, True, 3.0, share, first_content_s=0.2, frames=40, recent_itl_s=gap)
        for _ in range(n)
    ]


def slowdown(samples: list[Sample], requests: list[InFlight]) -> float:
    model, pace = build_model(samples), decode_pace(samples)
    progress = Progress(len(requests), tuple(requests))

    def cell(profile: str) -> CellModel:
        return model

    def paced(profile: str) -> DecodePace:
        return pace

    return engine_slowdown(progress, ["chat"], cell, paced, min_samples=5).live


def test_streams_in_flight_at_a_slower_pace_make_the_factor() -> None:
    samples = stream_samples(0.020)
    assert slowdown(samples, streaming(0.026 * 2.5, 6)) > 2.0  # 0.026 s: the fit at the 6 in flight
    assert slowdown(samples, streaming(0.026, 6)) == 1.0  # on the fit: no slow-down


def test_a_load_its_streams_never_met_is_not_a_slow_down() -> None:
    samples = stream_samples(0.020)  # measured up to 8 in flight
    assert slowdown(samples, streaming(0.026 * 2.5, 6)) > 2.0
    assert slowdown(samples, streaming(0.026 * 2.5, 12)) == 1.0  # 12 in flight: beyond what the fit knows


def throttled_under_way(n: int, c: int = 12, recent: float = 0.075, mean: float = 0.03) -> list[InFlight]:
    """Streams `c` in flight (beyond what stream_samples measured) whose frames came `mean` s apart since
    their first content and `recent` s apart lately: their engine slowed while they ran."""
    frames = 40
    elapsed = 0.2 + mean * (frames - 1)
    return [
        InFlight("chat", c, True, elapsed, first_content_s=0.2, frames=frames, recent_itl_s=recent)
        for _ in range(n)
    ]


def test_at_a_load_never_met_streams_whose_own_pace_slowed_with_nothing_joining_make_the_factor() -> None:
    samples = stream_samples(0.020)  # measured up to 8 in flight
    assert slowdown(samples, throttled_under_way(6)) == pytest.approx(2.5)
    assert slowdown(samples, throttled_under_way(6, recent=0.03)) == 1.0  # a steady pace: nothing changed
    # A request sent since their content began: the load may have grown under them, so their pace says
    # nothing of the engine.
    joined = [*throttled_under_way(6), InFlight("chat", 13, True, 0.5)]
    assert slowdown(samples, joined) == 1.0
    # Their device's other engine busier lately than over their lives: the neighbour took the steps.
    beside = [replace(r, recent_share=0.5) for r in throttled_under_way(6)]
    assert slowdown(samples, beside) == 1.0


def test_streams_whose_newest_steps_ran_a_burst_of_prefills_say_nothing_of_the_pace() -> None:
    samples = stream_samples(0.020)
    slow = streaming(0.026 * 2.5, 6)
    assert slowdown(samples, slow) > 2.0
    # The same gaps while a wave of new requests arrived: their prefill lengthened the steps.
    admitting = [replace(r, recent_arrivals=MAX_ARRIVALS) for r in slow]
    assert slowdown(samples, admitting) == 1.0
    assert slowdown(samples, [replace(r, recent_arrivals=MAX_ARRIVALS - 1) for r in slow]) > 2.0


def test_a_single_slow_request_is_not_a_slow_down() -> None:
    samples = stream_samples(0.020)
    assert slowdown(samples, streaming(0.023 * 3, 1)) == 1.0  # too little evidence
    # Two slow streams among five on the fit: the median is on the fit.
    assert slowdown(samples, streaming(0.027 * 3, 2) + streaming(0.027, 5)) == 1.0


def test_contention_the_device_share_explains_is_not_counted_twice() -> None:
    samples = stream_samples(0.020, n=24, shared=True)
    slow_by_neighbour = 0.026 * 1.8  # what the fit's contention term predicts with the neighbour busy
    assert slowdown(samples, streaming(slow_by_neighbour, 6, share=1.0)) == 1.0
    assert slowdown(samples, streaming(slow_by_neighbour * 2.5, 6, share=1.0)) > 2.0


def test_a_wait_shorter_than_the_predicted_ttft_says_nothing_and_a_long_one_is_a_lower_bound() -> None:
    samples = stream_samples(0.020)
    fresh = [InFlight("chat", 2, True, 0.1) for _ in range(8)]  # predicted TTFT 0.2 s: not yet late
    assert slowdown(samples, fresh) == 1.0
    late = [InFlight("chat", 2, True, 0.6) for _ in range(8)]  # 3x the predicted TTFT and still waiting
    assert slowdown(samples, late) > 2.9


def test_a_wait_behind_the_prompts_queued_ahead_is_not_a_slow_down() -> None:
    samples = stream_samples(0.020)  # prompts of 500 tokens, TTFT 0.2 s
    # Eight prompts of the cell's mean length sent together, none answered yet, each 3x the fit's TTFT:
    # each waits behind eight prefills (4000 tokens, 8x the mean), which the fit, measured on arrivals one
    # at a time, does not know.
    together = [InFlight("chat", 2, True, 0.6, prompt_tokens=500) for _ in range(8)]
    assert slowdown(samples, together) == 1.0
    assert slowdown(samples, [replace(r, prompt_tokens=0) for r in together]) > 2.9  # prompts unknown
    # Counted in tokens, not requests: eight 60-token prompts queue less than one of the mean's length.
    short = [replace(r, prompt_tokens=60) for r in together]
    assert slowdown(samples, short) > 2.9
    # Only what was sent no later waits ahead: a request sent before the others waits for its own prompt.
    first = [replace(r, elapsed_s=0.6 + 0.001 * i, prompt_tokens=100) for i, r in enumerate(together)]
    assert slowdown(samples, first) > 2.0  # the oldest five wait behind at most 500 tokens


def test_a_profile_whose_fit_moved_scales_the_cells_that_predate_it() -> None:
    fast, slow = stream_samples(0.020, n=20), stream_samples(0.020 * 2.5, n=5)
    moved = decode_pace(fast + slow)
    assert 2.0 < moved.shift < 3.0
    stale = build_model(fast)  # another profile's cell, measured before the change
    current = build_model(fast + slow)  # the cell that changed regime: its fit holds the change already
    assert current.regime_run > 0 and stale.regime_run == 0

    def cell(profile: str) -> CellModel:
        return current if profile == "chat" else stale

    def pace(profile: str) -> DecodePace:
        return moved if profile == "chat" else decode_pace(fast)

    found = engine_slowdown(Progress(), ["chat", "code"], cell, pace, min_samples=5)
    assert found.for_cell(current) == 1.0
    assert found.for_cell(stale) == moved.shift
    grown = scaled(stale, found.for_cell(stale))
    assert stale.tpot is not None and grown.tpot is not None
    assert grown.tpot.at(2) == pytest.approx(stale.tpot.at(2) * moved.shift)


def found(samples: list[Sample], requests: list[InFlight], at: float, before: Slowdown | None) -> Slowdown:
    model, pace = build_model(samples), decode_pace(samples)
    progress = Progress(len(requests), tuple(requests))
    return engine_slowdown(
        progress, ["chat"], lambda _: model, lambda _: pace, min_samples=5, at=at, before=before
    )


def test_a_slow_down_seen_holds_while_nothing_in_flight_says_otherwise() -> None:
    samples = stream_samples(0.020)
    seen = found(samples, streaming(0.026 * 2.5, 6), at=100.0, before=None)
    assert seen.live > 2.0 and seen.held_until > 100.0
    # The traffic left: nothing in flight, and the newest finished streams are on the fit (they were served
    # before the slow-down). The factor holds until a request sent at 100 s has had time to finish slowly.
    assert found(samples, [], at=100.5, before=seen).live == seen.live
    assert found(samples, [], at=seen.held_until + 0.1, before=seen).live == 1.0
    # Fresh evidence on the fit ends it at once.
    assert found(samples, streaming(0.026, 6), at=100.5, before=seen).live == 1.0


def test_a_fit_that_took_the_slow_down_in_ends_the_hold() -> None:
    fast = stream_samples(0.020, n=20)
    seen = found(fast, streaming(0.026 * 2.5, 6), at=100.0, before=None)
    moved = fast + stream_samples(0.020 * 2.5, n=5)  # 5 slow answers: the fit restarts from them
    assert found(moved, [], at=100.5, before=seen).live == 1.0


def test_the_newest_finished_are_read_against_the_streams_before_them() -> None:
    # 1.4x slower answers: short of a pace change, so the cell's fit takes them in and drifts toward them;
    # read against the streams before them they still show how much slower they are.
    samples = stream_samples(0.020, n=16) + stream_samples(0.020 * 1.4, n=5)
    pace = decode_pace(samples)
    assert pace.shift == 1.0  # no regime change
    assert len(pace.newest) == 5 and min(pace.newest) > 1.3
    assert pace.fit is not None
    own = [s.mean_itl / expect(pace.fit, s.concurrency, 0.0) for s in samples[-5:] if s.mean_itl]
    assert max(own) < 1.25  # against the fit they are part of, most of it is hidden


def test_a_finished_stream_that_decoded_at_a_load_never_measured_says_nothing() -> None:
    # The newest five were sent at loads 1..5 and 1.4x slower: read at their dispatch, slow. Had a burst
    # of 16 joined them right after (their mean load over their lives), they say nothing: the streams
    # before them never decoded beyond 8.
    before = stream_samples(0.020, n=16)
    slow = stream_samples(0.020 * 1.4, n=5)
    assert min(decode_pace(before + slow).newest) > 1.3
    joined = [replace(sample, mean_load=16.0) for sample in slow]
    assert decode_pace(before + joined).newest == ()
    light = [replace(sample, mean_load=float(sample.concurrency) + 0.5) for sample in slow]
    assert len(decode_pace(before + light).newest) == 5  # a life at loads measured still counts


def test_answers_half_again_slower_restart_the_pace() -> None:
    # Beside a busy neighbour a throttled engine reads well under its own slow-down (the neighbour's share
    # of each step is not slowed with it): finished streams, measured as the fit was, count from 1.5x.
    samples = stream_samples(0.020, n=16) + stream_samples(0.020 * 1.7, n=5)
    moved = decode_pace(samples)
    assert 1.5 < moved.shift < 1.9
    assert found(samples, [], at=0.0, before=None).live == 1.0  # the fit holds it: not counted again
    assert decode_pace(samples[:16] + stream_samples(0.020 * 1.3, n=5)).shift == 1.0


def test_streams_that_decoded_at_a_load_never_measured_make_no_regime_change() -> None:
    # Sent at loads 1..5, 1.7x slower: a change. Decoded at 16 (a burst joined them), they say nothing:
    # the streams before them never decoded beyond 8, and a burst decodes slower whatever the engine.
    samples = stream_samples(0.020, n=16)
    slow = stream_samples(0.020 * 1.7, n=5)
    assert decode_pace(samples + slow).shift > 1.5
    burst = [replace(sample, mean_load=16.0) for sample in slow]
    assert decode_pace(samples + burst).shift == 1.0


def test_one_stream_at_the_old_pace_does_not_undo_a_restarted_pace() -> None:
    # A lone request beside a busy neighbour reads near the old fit (the neighbour's share of each step is
    # not slowed): it is noise in the slowed regime, and five slow streams before it still say 2.5x.
    slowed = stream_samples(0.020, n=16) + stream_samples(0.020 * 2.5, n=5)
    assert decode_pace(slowed + stream_samples(0.020, n=1)).shift > 2.0


def test_streams_in_flight_are_read_against_the_fit_before_the_newest_finished() -> None:
    """Four slowed streams finish at the top load, one short of a regime change: a fit of all of them bends
    up there, and the streams still in flight at that pace would read on it (spark-duo-degrading, at the
    first request sent to the healthy neighbour, read 13 slow then none)."""
    samples, slowed = stream_samples(0.020, n=16), (0.020 + 0.008) * 2.5
    in_flight = streaming(slowed, 6, c=8)
    assert slowdown(samples, in_flight) > 2.0
    finished = [replace(s, mean_itl=slowed, concurrency=8) for s in samples[-4:]]
    assert slowdown(samples + finished, in_flight) > 2.0


def test_the_pace_of_a_finished_stream_is_its_trimmed_gap_not_its_mean() -> None:
    """A stream's mean gap takes in the few long steps that ran the prefill of requests arriving beside it:
    on spark-home-35b a closed loop of 8k-token prompts read 1.8x slower than the short prompts before it
    on a healthy engine, and that shift scaled every cell of the engine. Without its longest tenth, the
    mean is the step."""
    samples = stream_samples(0.020, n=16)
    fresh = stream_samples(0.020, n=5)
    stalled = [replace(s, mean_itl=s.mean_itl * 3, trimmed_itl=s.mean_itl) for s in fresh]
    assert decode_pace(samples + stalled).shift == 1.0
    slowed = [replace(s, trimmed_itl=s.mean_itl * 2.5) for s in stream_samples(0.020, n=5)]
    assert decode_pace(samples + slowed).shift > 2.0  # a slower step is still a slow-down
    means_only = [replace(s, trimmed_itl=None) for s in stalled]  # samples restored from an older snapshot
    assert decode_pace(samples + means_only).shift > 2.0


def throttled_after_early(early: float | None = 0.06, n: int = 1) -> list[InFlight]:
    """Streams whose first 32 gaps were 60 ms and the next 32 120 ms (their engine throttled 2x under way):
    their mean gap since their first content, 90 ms, is between the two; `early` their early pace as the
    progress book reads it (None: not known)."""
    frames = 65
    elapsed = 0.2 + 32 * 0.06 + 32 * 0.12
    return [
        InFlight(
            "chat",
            12,
            True,
            elapsed,
            first_content_s=0.2,
            frames=frames,
            recent_itl_s=0.12,
            early_itl_s=early,
        )
        for _ in range(n)
    ]


def test_a_stream_whose_pace_changed_under_way_reads_it_against_its_early_gaps_where_asked() -> None:
    (r,) = throttled_after_early()
    assert pace_change(r, early=True) == pytest.approx(2.0)
    change = pace_change(r)
    assert change is not None and change < 1.5  # the mean takes in the slowed gaps too
    assert change == pytest.approx(0.12 / 0.09)
    # Without an early pace known (too few frames for it), the mean serves either way.
    (unknown,) = throttled_after_early(early=None)
    assert pace_change(unknown, early=True) == pytest.approx(change)
    assert pace_change(unknown) == pytest.approx(change)
    # At a load never measured, with nothing joined since, it is read against its early pace.
    assert unmeasured_load_change(r, youngest_s=r.elapsed_s) == pytest.approx(2.0)
    assert unmeasured_load_change(unknown, youngest_s=r.elapsed_s) == pytest.approx(change)


def test_a_stream_of_a_profile_not_yet_measured_still_gives_its_pace_change() -> None:
    streams = throttled_under_way(6)  # 2.5x its own mean gap lately, nothing joined since
    short = build_model(stream_samples(0.020, n=3))  # fewer than min_samples

    def ratios(requests: list[InFlight], model: CellModel | None) -> list[float]:
        progress = Progress(len(requests), tuple(requests))
        return live_ratios(progress, lambda _: model, lambda _: DecodePace(), 1.0, min_samples=5)

    assert ratios(streams, None) == pytest.approx([2.5] * 6)  # no cell at all
    assert ratios(streams, short) == pytest.approx([2.5] * 6)
    # Read against its early gaps, as at a load never measured.
    assert ratios(throttled_after_early(n=5), None) == pytest.approx([2.0] * 5)
    # Not yet read at its pace; a request sent since its content began; gaps served beside a wave of
    # arrivals: nothing.
    assert ratios([replace(r, frames=MIN_FRAMES - 1) for r in streams], None) == []
    assert ratios([*streams, InFlight("chat", 13, True, 0.5)], None) == []
    assert ratios([replace(r, recent_arrivals=MAX_ARRIVALS) for r in streams], short) == []
    assert ratios([replace(r, recent_arrivals=MAX_ARRIVALS - 1) for r in streams], short) == pytest.approx(
        [2.5] * 6
    )
    # So a backend serving a profile it has barely measured is seen slowed.
    assert slowdown(stream_samples(0.020, n=3), streams) == pytest.approx(2.5)


def test_the_decode_pace_is_fitted_at_the_load_streams_decoded_at_not_the_one_they_met_at_dispatch() -> None:
    # Single streams at 0.045 s a frame, a 16-user round at 0.109, then requests of the next burst sent at
    # loads 2 and up that decoded beside fourteen others at 0.12: on the fit of the loads they decoded at.
    # Fitted at their dispatch they read 2-2.7x slow as the newest finished (four of them), made a regime
    # change of 2.2x (six), and kept the next burst's streams at 1.5x slowed (ten).
    def stream(c: int, life: float, gap: float) -> Sample:
        return Sample(
            e2e=0.2 + 255 * gap,
            ttft=0.2,
            output_tokens=256,
            prompt_tokens=2048,
            concurrency=c,
            mean_itl=gap,
            trimmed_itl=gap,
            mean_load=life,
        )

    measured = [stream(2, 2.0, 0.045) for _ in range(10)] + [stream(16, 16.0, 0.109) for _ in range(10)]

    def sent_early(n: int) -> list[Sample]:
        return [stream(c, 15.0, 0.12) for c in range(2, 2 + n)]

    assert max(decode_pace(measured + sent_early(4)).newest) < 1.3
    assert decode_pace(measured + sent_early(6)).shift == 1.0
    fit = decode_pace(measured + sent_early(10)).reference.fit
    assert fit is not None and expect(fit, 14, 0.0) == pytest.approx(0.104, rel=0.1)
    assert slowdown(measured + sent_early(10), streaming(0.11, 12, c=14)) == 1.0


def test_a_load_reached_by_one_stream_at_the_top_of_the_fit_is_not_one_its_streams_met() -> None:
    # Six short prompts alone at 0.040 s a frame and one long prompt at four, at 0.140: a line through
    # them puts 0.107 s at three. A stream there at 0.164, twice its own early pace, read 1.5x on it; the
    # fit does not reach three, and its own pace says 2x.
    def stream(c: int, gap: float) -> Sample:
        return Sample(
            e2e=0.2 + 255 * gap,
            ttft=0.2,
            output_tokens=256,
            prompt_tokens=512,
            concurrency=c,
            mean_itl=gap,
            trimmed_itl=gap,
            mean_load=float(c),
        )

    samples = [stream(1, 0.040) for _ in range(6)] + [stream(4, 0.140)]
    pace = decode_pace(samples)
    assert not pace.covers(3, 0.0) and pace.covers(1, 0.0)
    throttled = InFlight(
        "chat", 3, True, 21.0, first_content_s=5.0, frames=102, recent_itl_s=0.164, early_itl_s=0.082
    )
    assert live_ratios(
        Progress(3, (throttled,)), lambda p: build_model(samples), lambda p: pace, 1.0, min_samples=5
    ) == [pytest.approx(2.0, rel=0.01)]


def test_streams_spread_over_the_loads_reach_the_top_one() -> None:
    assert load_reach([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]) == 8.0
    assert load_reach([1.0, 1.0, 1.0, 1.0, 4.0]) == 1.0
    assert load_reach([1.0, 1.0, 4.0, 4.0]) == 4.0
    assert load_reach([2.0]) == 2.0
