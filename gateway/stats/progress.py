"""Requests in flight, as far as each has gone: the partial observations adaptive routing reads before an
answer ends (docs/measurement.md, section 8).

A finished request becomes a Sample only at its last byte; on a backend that slows down mid-run that is a
whole request's duration later (a minute for a long answer), while every stream it is serving already shows
the slow-down in the pace of its content frames. Dispatch accounting (proxy/accounting.py) notes each attempt
here when it is sent and forgets it when it ends; the SSE relay attaches its stream meter once the stream
is pumped. `view(backend)` turns what is known into plain `InFlight` records for the router (handed in by
app.py, like the engine hints), bounded to the longest-running requests, which say the most.

The hot path pays a dict insertion and removal per attempt; the reading happens when the router asks.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from gateway.clock import monotonic
from gateway.records import InFlight, Progress

# Requests of one backend handed to the router per view: the longest-running first. A batch of an engine
# (16 to 32 sequences) fits, and the router's work per decision stays bounded whatever the load.
MAX_VIEW = 32
# The newest content gaps a stream's current pace is taken from (their median: the steps that also ran a
# neighbour's prefill chunk, at a burst's start or as the next requests of a closed loop arrive, are a few
# among them), recent enough to show a slow-down within a few seconds of it.
RECENT_GAPS = 16
# Readings of the device-shared seconds kept per attempt, to tell the share of its newest gaps' span: one
# is kept at most every quarter of that span, so eight reach back two spans.
MARKS = 8

Clock = Callable[[], float]


class Meter(Protocol):
    """What the SSE meter (proxy/stream.py) measures of a stream so far, on gateway/clock.py's clock."""

    @property
    def first_token_at(self) -> float | None: ...

    @property
    def content_frames(self) -> int: ...

    @property
    def itl(self) -> Sequence[float]: ...


class Attempt:
    """One attempt in flight: where it went, when, at what load; its stream meter once it streams."""

    __slots__ = (
        "backend",
        "profile",
        "concurrency",
        "stream",
        "sent",
        "shared_at",
        "prompt_tokens",
        "meter",
        "marks",
    )

    def __init__(
        self,
        backend: str,
        profile: str,
        concurrency: int,
        stream: bool,
        sent: float,
        shared_at: float,
        prompt_tokens: int = 0,
    ) -> None:
        self.backend = backend
        self.profile = profile
        self.concurrency = concurrency
        self.stream = stream
        self.prompt_tokens = prompt_tokens  # estimated (0: unknown)
        self.sent = sent  # gateway.clock.monotonic, the stream meter's clock
        self.shared_at = shared_at  # the backend's device-shared seconds when it was sent
        self.meter: Meter | None = None
        # (clock, device-shared seconds) readings taken when viewed, oldest first: the share over any
        # recent span is read between two of them.
        self.marks: deque[tuple[float, float]] = deque([(sent, shared_at)], maxlen=MARKS)


class ProgressBook:
    """The attempts in flight per backend. `shared_seconds` is the dispatcher's device-time reading
    (accounting.DeviceTime), set when the book is attached to it."""

    def __init__(self, clock: Clock = monotonic) -> None:
        self.clock = clock
        self.shared_seconds: Callable[[str], float] = lambda backend: 0.0
        self._attempts: dict[str, dict[Attempt, None]] = {}  # backend -> attempts, oldest first

    def started(
        self,
        backend: str,
        profile: str,
        concurrency: int,
        stream: bool,
        shared_at: float,
        prompt_tokens: int = 0,
    ) -> Attempt:
        attempt = Attempt(backend, profile, concurrency, stream, self.clock(), shared_at, prompt_tokens)
        self._attempts.setdefault(backend, {})[attempt] = None
        return attempt

    def ended(self, attempt: Attempt) -> None:
        attempts = self._attempts.get(attempt.backend)
        if attempts is not None:
            attempts.pop(attempt, None)

    def view(self, backend: str, mark: bool = True) -> Progress:
        """`backend`'s attempts in flight: their number and the longest-running (at most MAX_VIEW) as plain
        records. Each view also keeps a reading of each attempt's device time, spaced over its life, for
        the next views' recent share; `mark` False only looks (a reader besides the routing decisions
        must not change what they will read)."""
        attempts = self._attempts.get(backend)
        if not attempts:
            return Progress()
        now = self.clock()
        shared_now = self.shared_seconds(backend)
        oldest = [a for a, _ in zip(attempts, range(MAX_VIEW), strict=False)]  # insertion order: oldest first
        sent = [a.sent for a in attempts]  # ascending, as the attempts were sent
        return Progress(len(attempts), tuple(_record(a, now, shared_now, sent, mark) for a in oldest))


def _record(attempt: Attempt, now: float, shared_now: float, sent: Sequence[float], mark: bool) -> InFlight:
    """`sent`: when each attempt in flight on the backend was sent, ascending."""
    elapsed = max(0.0, now - attempt.sent)
    share = _share(attempt.sent, attempt.shared_at, now, shared_now)
    meter = attempt.meter
    first = meter.first_token_at if meter is not None else None
    gaps = meter.itl[-RECENT_GAPS:] if meter is not None and first is not None else []
    span = sum(gaps)
    recent = _share(*_reading_before(attempt, now - span), now, shared_now) if gaps else None
    # Readings spaced a quarter of the span the share is read over (of the life so far before content).
    if mark and now - attempt.marks[-1][0] >= (span if gaps else elapsed) / 4:
        attempt.marks.append((now, shared_now))
    known = (attempt.profile, attempt.concurrency, attempt.stream, elapsed, share, attempt.prompt_tokens)
    if meter is None or first is None:
        return InFlight(*known)
    return InFlight(
        *known,
        first_content_s=max(0.0, first - attempt.sent),
        frames=meter.content_frames,
        recent_itl_s=statistics.median(gaps) if gaps else None,
        early_itl_s=early_gap(meter.itl),
        recent_share=recent,
        recent_arrivals=_sent_since(sent, now - span, attempt) if gaps else 0,
    )


def early_gap(itl: Sequence[float]) -> float | None:
    """The median of a stream's gaps RECENT_GAPS to 2 x RECENT_GAPS (its pace early on: the first steps
    also ran the prefill of the requests sent with it), once it has as many again after them, so the
    window and the newest gaps do not overlap; else None. A throttle that came a few seconds into the
    stream leaves its mean gap since the first content within half again of its newest gaps for good:
    four 8k-token streams throttled 2x read 1.2-1.3x that way, 2x against their early pace."""
    if len(itl) < 3 * RECENT_GAPS:
        return None
    return statistics.median(itl[RECENT_GAPS : 2 * RECENT_GAPS])


def _sent_since(sent: Sequence[float], start: float, attempt: Attempt) -> int:
    """How many of the attempts sent at `sent` (ascending) were sent at or after `start`, `attempt` aside."""
    return len(sent) - bisect_left(sent, start) - (attempt.sent >= start)


def _reading_before(attempt: Attempt, start: float) -> tuple[float, float]:
    """The newest (clock, device-shared seconds) reading at or before `start` (the oldest kept when none
    reaches back so far)."""
    found = attempt.marks[0]
    for mark in attempt.marks:
        if mark[0] > start:
            break
        found = mark
    return found


def _share(since: float, shared_since: float, now: float, shared_now: float) -> float:
    elapsed = now - since
    return min(1.0, max(0.0, (shared_now - shared_since) / elapsed)) if elapsed > 0 else 0.0
