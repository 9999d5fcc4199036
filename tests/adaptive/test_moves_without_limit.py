"""A stream whose request set no token limit (what most clients send) is moved off an engine seen slowed
when the profile's finished answers say it has much left to write, and stays when they say it is nearly
done or do not say (SlowedEngineMoves.moves, move_choice.expected_left)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.policy.schema import Adaptive
from gateway.proxy.move_choice import MoveQuestion, Underway, expected_left
from gateway.proxy.move_planner import SlowedEngineMoves
from gateway.records import BackendSnapshot, InFlight, Progress
from gateway.routing.adaptive.scorer import AdaptiveScorer
from gateway.stats.live import LiveRecorder
from tests.adaptive.test_slowed_prior import streams

NOW = 1_000_000.0


def throttled(n: int = 6) -> Progress:
    """x's streams under way, 2.5x its fit now (0.026 s a token at 6 in flight), 0.03 s a token on average
    since their first frame: x slowed while they ran."""
    frames = 40
    stream = InFlight(
        "default", n, True, 1.0 + 0.03 * (frames - 1), first_content_s=1.0, frames=frames, recent_itl_s=0.065
    )
    return Progress(n, (stream,) * n)


def moved(streams_underway: list[Underway], answer_lengths: list[int]) -> list[bool]:
    recorder = LiveRecorder(clock=lambda: NOW)
    for name in ("x", "y"):
        for sample in streams(0.020):
            recorder.record(name, "default", replace(sample, output_tokens=answer_lengths[0]))
    for length in answer_lengths[1:]:
        recorder.record("y", "default", replace(streams(0.020, 1)[0], output_tokens=length))
    progress = lambda name: throttled() if name == "x" else Progress()  # noqa: E731
    scorer = AdaptiveScorer(recorder, progress=progress)
    pool = [BackendSnapshot("x", inflight=6), BackendSnapshot("y", inflight=0)]
    question = MoveQuestion("x", "default", streams_underway, pool, "y", Adaptive())
    return SlowedEngineMoves(recorder, progress, {}, scorer.slowdowns).moves(question)


def test_a_stream_without_a_limit_moves_when_the_profiles_answers_say_much_is_left() -> None:
    # The profile's answers are 100 tokens long; one 40 tokens in has 60 left: 3.9 s here, about 1.5 s on y.
    assert moved([Underway(500, 40, None)], [100]) == [True]
    assert moved([Underway(500, 40, 60)], [100]) == [True]  # the same stream with its limit said


def test_a_stream_without_a_limit_stays_when_the_answers_say_it_is_nearly_done_or_do_not_say() -> None:
    assert moved([Underway(500, 98, None)], [100]) == [False]  # 2 tokens left: not worth a prefill
    # None of the profile's answers went as far as this one: nothing says how much is left.
    assert moved([Underway(500, 140, None)], [100]) == [False]


def test_what_is_left_is_read_among_the_answers_that_went_as_far() -> None:
    lengths = [20, 30, 200, 300, 400, 40]
    assert expected_left(100, lengths, min_samples=3) == 200  # of 100, 200 and 300 beyond it
    # 10, 20, 30, 190, 290 and 390 beyond it
    assert expected_left(10, lengths, min_samples=3) == 110
    assert expected_left(300, lengths, min_samples=3) is None  # only one went further
    assert expected_left(0, [], min_samples=0) is None


@pytest.mark.parametrize("left", [None, 0])
def test_a_stream_with_nothing_known_left_is_never_weighed(left: int | None) -> None:
    assert moved([Underway(500, 40, left)], [40]) == [False]
