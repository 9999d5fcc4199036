"""The progress book: requests in flight as far as each has gone, as plain records for the router."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.stats.progress import MAX_VIEW, Attempt, ProgressBook


@dataclass
class FakeMeter:
    first_token_at: float | None = None
    content_frames: int = 0
    itl: list[float] = field(default_factory=list)


def one_attempt(now: list[float], shared: dict[str, float], concurrency: int) -> tuple[ProgressBook, Attempt]:
    """A book on the clock `now[0]` and device-shared seconds `shared`, with one stream sent to x."""
    book = ProgressBook(clock=lambda: now[0])
    book.shared_seconds = shared.__getitem__
    return book, book.started("x", "chat", concurrency=concurrency, stream=True, shared_at=0.0)


def test_a_request_is_seen_from_dispatch_to_its_end_with_what_its_stream_relayed() -> None:
    now = [100.0]
    shared = {"x": 0.0}
    book, attempt = one_attempt(now, shared, concurrency=3)
    now[0], shared["x"] = 102.0, 1.0  # a neighbour busy for one of the two seconds
    waiting = book.view("x")
    assert waiting.inflight == 1
    assert waiting.requests[0].elapsed_s == 2.0 and waiting.requests[0].first_content_s is None
    assert waiting.requests[0].device_share == 0.5 and waiting.requests[0].concurrency == 3
    attempt.meter = FakeMeter(first_token_at=100.5, content_frames=21, itl=[0.01] * 4 + [0.05] * 16)
    streaming = book.view("x").requests[0]
    assert streaming.first_content_s == 0.5 and streaming.frames == 21
    assert streaming.recent_itl_s is not None and abs(streaming.recent_itl_s - 0.05) < 1e-9  # newest gaps
    book.ended(attempt)
    assert book.view("x").inflight == 0 and book.view("y").requests == ()


def test_the_view_is_bounded_to_the_longest_running() -> None:
    now = [0.0]
    book = ProgressBook(clock=lambda: now[0])
    for i in range(MAX_VIEW + 10):
        now[0] = float(i)
        book.started("x", "chat", concurrency=i + 1, stream=False, shared_at=0.0)
    view = book.view("x")
    assert view.inflight == MAX_VIEW + 10 and len(view.requests) == MAX_VIEW
    assert view.requests[0].concurrency == 1  # the oldest first


def test_the_pace_is_the_median_of_the_newest_gaps_and_its_share_is_theirs() -> None:
    now = [0.0]
    shared = {"x": 0.0}
    book, attempt = one_attempt(now, shared, concurrency=1)
    meter = FakeMeter(first_token_at=1.0)
    attempt.meter = meter
    # Streaming alone for 20 s, 8 frames a second, viewed every second (each view notes the device-shared
    # seconds)...
    for second in range(2, 21):
        now[0] = float(second)
        meter.itl += [0.125] * 8
        book.view("x")
    # ...then a neighbour busy for the last 2 s: 2 of the 22 s of the whole request, all of its newest gaps.
    now[0], shared["x"] = 22.0, 2.0
    meter.itl += [0.125] * 12 + [0.5, 0.5]  # two steps stretched by the neighbour's prefill
    meter.content_frames = len(meter.itl) + 1
    seen = book.view("x").requests[0]
    assert seen.recent_itl_s == 0.125  # the stretched steps are two among sixteen
    assert seen.device_share == 2.0 / 22.0
    # The newest gaps span 2.75 s: read from the reading at 19 s, the last one before their start, the
    # neighbour was busy 2 of the last 3 s (the whole request's share would say 1 in 11).
    assert seen.recent_share == 2.0 / 3.0


def test_a_stream_counts_the_requests_sent_to_its_backend_while_its_newest_gaps_were_served() -> None:
    now = [0.0]
    book, attempt = one_attempt(now, {"x": 0.0}, concurrency=1)
    now[0] = 5.0
    book.started("x", "chat", concurrency=2, stream=True, shared_at=0.0)  # before its newest gaps began
    now[0] = 9.0
    for _ in range(3):  # a burst while they were served
        book.started("x", "chat", concurrency=3, stream=True, shared_at=0.0)
    book.started("y", "chat", concurrency=1, stream=True, shared_at=0.0)  # another backend's
    now[0] = 10.0
    attempt.meter = FakeMeter(first_token_at=1.0, content_frames=40, itl=[0.25] * 39)  # the last 4 s: 16 gaps
    seen = book.view("x").requests[0]
    assert seen.recent_arrivals == 3
    attempt.meter.itl = [0.25] * 20 + [0.05] * 16  # its newest gaps span the last 0.8 s: none arrived then
    assert book.view("x").requests[0].recent_arrivals == 0
