"""A stream's early pace (stats/progress.early_gap): its gaps clear of its first steps, read once its newest
gaps are past them, for the router to tell a change that came while it ran."""

from __future__ import annotations

import pytest

from gateway.stats.progress import RECENT_GAPS, early_gap
from tests.stats.test_progress import FakeMeter, one_attempt


def throttled_gaps(n: int) -> list[float]:
    """`n` gaps: the first RECENT_GAPS stretched by the prefill of the requests sent with it (0.5 s), the
    next RECENT_GAPS at 60 ms but one, then 120 ms (its engine throttled)."""
    early = [0.06] * (RECENT_GAPS - 1) + [0.3]  # one step ran a neighbour's prefill chunk
    return ([0.5] * RECENT_GAPS + early + [0.12] * n)[:n]


def test_the_early_pace_is_the_median_of_the_second_window_of_gaps_once_as_many_follow_it() -> None:
    assert early_gap([]) is None
    assert early_gap(throttled_gaps(3 * RECENT_GAPS - 1)) is None  # the newest gaps would overlap it
    assert early_gap(throttled_gaps(3 * RECENT_GAPS)) == 0.06  # not the first steps, nor the odd long one
    assert early_gap(throttled_gaps(5 * RECENT_GAPS)) == 0.06  # it stays put as the stream goes on
    assert early_gap(
        [0.01] * RECENT_GAPS + [0.02, 0.04] * (RECENT_GAPS // 2) + [0.1] * RECENT_GAPS
    ) == pytest.approx(0.03)


def test_a_stream_in_flight_carries_its_early_pace_once_it_has_the_gaps_for_it() -> None:
    now = [10.0]
    book, attempt = one_attempt(now, {"x": 0.0}, concurrency=1)
    gaps = throttled_gaps(3 * RECENT_GAPS - 1)
    attempt.meter = FakeMeter(first_token_at=10.5, content_frames=len(gaps) + 1, itl=gaps)
    short = book.view("x").requests[0]
    assert short.early_itl_s is None and short.recent_itl_s == 0.12
    gaps.append(0.12)
    attempt.meter.content_frames += 1
    seen = book.view("x").requests[0]
    assert seen.early_itl_s == 0.06 and seen.recent_itl_s == 0.12
    attempt.meter = FakeMeter(first_token_at=None, itl=gaps)  # no content yet: no pace of any kind
    assert book.view("x").requests[0].early_itl_s is None
