"""Requests still in flight, as far as each has gone: what routing may read of them before they finish."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InFlight:
    """One request in flight on a backend (stats/progress.py keeps them; times are seconds).

    A finished request says how fast its backend was; one in flight already says how slow it is at least:
    a long wait for the first content, or content relayed at a slow pace, shows before the answer ends.
    """

    profile: str
    concurrency: int  # the backend's in-flight count at dispatch, this request included
    stream: bool
    elapsed_s: float  # since dispatch
    # Share of `elapsed_s` (0..1) during which another backend of its device had requests in flight.
    device_share: float = 0.0
    prompt_tokens: int = 0  # its prompt as the router estimated it (0: unknown): a long one waits longer
    first_content_s: float | None = None  # dispatch -> first content; None: no content yet
    frames: int = 0  # content frames relayed so far
    recent_itl_s: float | None = None  # median gap between its newest content frames; None: fewer than two
    # Median gap of its content frames early on, clear of its first steps (stats/progress.early_gap; None:
    # too few frames yet for that window and the newest gaps not to overlap): its pace before any change
    # that came while it ran.
    early_itl_s: float | None = None
    # Share of the span of those newest gaps during which another backend of its device was busy: what
    # they were served beside (None: no gaps yet). A neighbour busy only lately slows the newest gaps, not
    # the whole request's share; read against `device_share` they would look like a slow-down.
    recent_share: float | None = None
    # Requests sent to its backend during the span of those newest gaps: each one's prefill ran in some of
    # those steps, so with many the gaps measure admissions, not the decode pace.
    recent_arrivals: int = 0


@dataclass(frozen=True, slots=True)
class Progress:
    """A backend's requests in flight: how many, and the longest-running of them (a bounded view)."""

    inflight: int = 0
    requests: tuple[InFlight, ...] = ()
