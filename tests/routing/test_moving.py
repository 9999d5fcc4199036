"""Which streams under way leave an engine seen slowed (proxy/move_choice.py): those with enough left to write
that the destination, prefill of what was written included, finishes them sooner, each moved one loading it
for the next."""

from __future__ import annotations

import pytest

from gateway.proxy.move_choice import (
    Destination,
    Underway,
    moving_off,
    pace_changes,
    plan_moves,
    worth_moving,
)
from gateway.records import InFlight, Progress, Sample
from gateway.routing.model.cells import build_model
from tests.adaptive.routing_loop import decode_samples


def paced(tpot_at: float, per_request: float) -> list[Sample]:
    """Answers whose decode time per token is tpot_at + per_request x (requests in flight), at loads 1-8."""
    return [
        Sample(
            e2e=0.1 + 255 * (tpot_at + per_request * c),
            ttft=0.1,
            output_tokens=256,
            prompt_tokens=2048,
            concurrency=c,
        )
        for c in range(1, 9)
        for _ in range(3)
    ]


SLOWED = build_model(decode_samples(0.05))  # 2.5x an engine decoding at 0.02 s a token
IDLE = Destination("b", 0, build_model(decode_samples(0.02)), device_busy=False)


def test_a_stream_with_much_left_moves_and_one_nearly_done_stays() -> None:
    streams = [Underway(2048, 50, 200), Underway(2048, 250, 2)]
    # 200 tokens: 11.3 s here at 16 in flight, 4.2 s there with the prefill of 2,098 tokens; 2 tokens: 0.11 s
    # here, 0.14 s there.
    assert plan_moves(SLOWED, 16, False, streams, IDLE, margin=0.25) == [True, False]


def test_each_moved_stream_loads_the_destination_for_the_next() -> None:
    # There, a token takes 0.02 + 0.01 s per request in flight: the third stream would finish no sooner.
    crowded = Destination("b", 0, build_model(paced(0.02, 0.01)), device_busy=False)
    moved = plan_moves(SLOWED, 16, False, [Underway(2048, 50, 200)] * 5, crowded, margin=0.25)
    assert moved == [True, True, False, False, False]


def test_nothing_moves_without_a_decode_pace_to_compare() -> None:
    unmeasured = build_model([])
    assert plan_moves(unmeasured, 16, False, [Underway(2048, 50, 200)], IDLE, margin=0.25) == [False]
    assert (
        not worth_moving(10.0, None, 0.25)
        and not worth_moving(10.0, 8.5, 0.25)
        and worth_moving(10.0, 7.9, 0.25)
    )


def streaming(recent_itl: float, mean_gap: float, frames: int = 100) -> InFlight:
    """A stream under way whose newest gaps are `recent_itl` apart, `mean_gap` apart since its first frame."""
    return InFlight(
        "default",
        16,
        True,
        elapsed_s=1.0 + mean_gap * (frames - 1),
        first_content_s=1.0,
        frames=frames,
        recent_itl_s=recent_itl,
    )


def test_an_engine_is_moved_off_only_when_every_stream_read_slowed_and_their_pace_changed_under_way() -> None:
    throttled = pace_changes(Progress(5, tuple(streaming(0.25, 0.12) for _ in range(5))))
    steady = pace_changes(Progress(5, tuple(streaming(0.21, 0.20) for _ in range(5))))
    assert throttled == pytest.approx([0.25 / 0.12] * 5) and steady == pytest.approx([1.05] * 5)
    assert moving_off([2.5] * 5, throttled, tolerance=0.25)
    # Steadily 2x its fits from the first frame: the fit's gap, not a change of the engine.
    assert not moving_off([2.0] * 5, steady, tolerance=0.25)
    assert not moving_off([2.5] * 4, throttled, tolerance=0.25)  # too few streams to say
    assert not moving_off([2.5, 2.5, 2.5, 2.5, 1.2], throttled, tolerance=0.25)  # one stream is not slowed
    # Too short to read a pace: not a change.
    assert pace_changes(Progress(1, (streaming(0.25, 0.12, frames=8),))) == []
