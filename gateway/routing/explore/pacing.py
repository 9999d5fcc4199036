"""Exploration pacing: which under-measured backend a request of a profile explores, and when; and the
state that decides it (credit per profile, explorations sent per cell), which changes only when a request
is booked as sent (docs/measurement.md, section 6).

Paced, not drawn: each request of a profile adds epsilon (times a share: below 1 at a costly moment, above
1, up to MAX_EPSILON, where exploring slows no other engine) to the profile's credit while some backend
other than the predicted winner has fewer than min_samples samples, and the request that brings it to 1
explores and spends 1. At epsilon 0.25 every fourth request explores,
so a cell is measured within min_samples / epsilon requests, never after a run of bad luck, and decisions
replay exactly. A cell past its age bound is refreshed at MAX_EPSILON whatever the contention
(`plan_refresh`, `stale_reason`); the ledger knows each cell's newest sends for that (`age`). Scoring only
reads this state and returns an ExplorationPlan; `ExplorationLedger.book`
applies the plan once the dispatcher has sent the request, and only then.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace

from gateway.policy.schema import MAX_EPSILON, MIN_SAMPLES, Adaptive
from gateway.records import ExplorationPlan
from gateway.routing.model.cells import CellView, repetitive

# A sum of float rates may fall just short of the 1 it adds up to (4 x 0.25 is exact, 10 x 0.1 is not).
ROUNDING = 1e-9


# Sends remembered per cell, newest last: an under-measured cell's age counts from its min_samples-th
# newest send, so this caps the min_samples that age can follow (policies use 5 to 10).
KEPT_SENDS = 32


@dataclass(frozen=True, slots=True)
class Exploration:
    backend: str
    why: str


@dataclass(frozen=True, slots=True)
class Age:
    """How old what the router knows of a cell is: requests of its profile booked since, and seconds."""

    requests: int
    seconds: float


def stale_reason(age: Age, *, max_requests: int, max_s: float, changed: int | None = None) -> str | None:
    """Why a cell's estimate is too old to trust, or None: past either bound (requests of its profile,
    seconds), or older than a change another backend of the profile went through `changed` samples ago
    (what was measured of this one then was compared against the old regime)."""
    if age.requests >= max_requests:
        return f"{age.requests} requests of its profile since measured (bound {max_requests})"
    if age.seconds >= max_s:
        return f"{age.seconds:.0f} s since measured (bound {max_s:g} s)"
    if changed is not None and age.requests >= changed:
        return f"measured before a regime change {changed} samples ago"
    return None


def plan_refresh(
    ages: Mapping[str, Age], credit: float, back_to_back: Collection[str] = ()
) -> tuple[Exploration | None, float]:
    """The refresh this request makes among the `ages` of cells past their bound, and the credit it adds.
    Contention no longer defers it: the stalest (ties by name) accrues MAX_EPSILON per request, so it is
    measured within two requests of its profile whatever its device's load, and one in `back_to_back` 1,
    so every request of the profile goes there until its estimate is under way: the requests of one
    estimate overlap on an engine that would slow a busy neighbour, which then shares the device for about
    one request's time instead of one per sample."""
    backend = min(ages, key=lambda name: (-ages[name].requests, -ages[name].seconds, name))
    rate = 1.0 if backend in back_to_back else MAX_EPSILON
    if credit + rate < 1.0 - ROUNDING:
        return None, rate
    return Exploration(backend, f"{backend}: refresh"), rate


def plan_exploration(
    sample_counts: Mapping[str, int],
    credit: float,
    *,
    min_samples: int = MIN_SAMPLES,
    epsilon: float,
    share: Callable[[str], float] = lambda backend: 1.0,
    unpaced: Collection[str] = (),
) -> tuple[Exploration | None, float | None]:
    """The exploration this request makes, if any, and the credit it adds (None: nothing is left to
    measure, so the profile's credit is dropped rather than carried into the next gap).

    `sample_counts` maps each backend that could be explored (the predicted winner is measured by its own
    traffic and left out) to its sample count for this request's profile. While some have fewer than
    `min_samples`, the least measured of them (ties by name) is the candidate and the request adds epsilon
    (capped at MAX_EPSILON) times `share(candidate)` to `credit`, at most MAX_EPSILON; it explores when
    that reaches 1. `share` below 1 makes a costly moment accrue less, above 1 a cheap one more (see
    adaptive.AdaptiveScorer): the cells cost the same min_samples requests either way, only sooner.
    Windows age out, so a backend that stops getting traffic drops below `min_samples` and is measured
    again. A candidate in `unpaced` accrues 1: every request explores it (its answers so far say exploring
    it costs nothing, adaptive.AdaptiveScorer._promising), still at most min_samples times.
    """
    under = sorted((n, backend) for backend, n in sample_counts.items() if n < min_samples)
    if not under:
        return None, None
    n, backend = under[0]
    paced = min(min(max(epsilon, 0.0), MAX_EPSILON) * share(backend), MAX_EPSILON)
    rate = 1.0 if backend in unpaced else paced
    if credit + rate < 1.0 - ROUNDING:
        return None, rate
    why = f"{backend}: {n} samples (< {min_samples}), explored at rate {rate:.3g} per request"
    return Exploration(backend, why), rate


class ExplorationLedger:
    """The exploration state of one router: credit per profile and, per (backend, profile) cell, when
    explorations were sent within the window (requests still in flight count, so a burst of arrivals cannot
    explore a cell more than min_samples times before its first answer is recorded).

    Scoring reads it (`credit`, `explorations`); only `book` changes it, once a request was sent. Bounded:
    at most `max_cells` cells, and a cell stops being explored, so stops growing, once it counts
    min_samples explorations within the window.
    """

    def __init__(self, max_cells: int) -> None:
        self.max_cells = max_cells
        self._credit: dict[str, float] = {}  # profile -> exploration credit
        self._sent: dict[tuple[str, str], deque[float]] = {}  # (backend, profile) -> when explorations went
        self._booked: dict[str, tuple[int, float]] = {}  # profile -> (requests booked, when the first was)
        # (backend, profile) -> its newest sends, each as (requests of the profile booked with it, when)
        self._routed: dict[tuple[str, str], deque[tuple[int, float]]] = {}

    def credit(self, profile: str) -> float:
        return self._credit.get(profile, 0.0)

    def age(self, backend: str, profile: str, now: float, nth: int = 1) -> Age:
        """Requests of `profile` booked, and seconds passed, since its `nth` newest send to `backend` (a
        cell sent fewer: since the profile's first booked request, so a cell never measured ages too)."""
        booked, started = self._booked.get(profile, (0, now))
        sends = self._routed.get((backend, profile))
        nth = max(1, min(nth, KEPT_SENDS))
        index, at = sends[-nth] if sends is not None and len(sends) >= nth else (0, started)
        return Age(booked - index, now - at)

    def explorations(self, backend: str, profile: str, since: float) -> int:
        """Explorations of the cell sent at or after `since` (the start of the window)."""
        sent = self._sent.get((backend, profile))
        return 0 if not sent else sum(1 for at in sent if at >= since)

    def book(self, plan: ExplorationPlan, backend: str, now: float, since: float) -> None:
        """Apply `plan` for a request just sent to `backend` at `now`: its credit accrues; it spends one
        credit and counts as an exploration only if it really went to the backend it was to explore.
        Explorations sent before `since` (out of the window) are forgotten on the way. Every request booked
        counts toward its profile's requests, and as a send to `backend` (what ages a cell)."""
        self._count(plan.profile, backend, now)
        if plan.drop:
            self._credit.pop(plan.profile, None)
            return
        credit = self._credit.get(plan.profile, 0.0) + plan.accrued
        if plan.backend is not None and (plan.backend == backend or plan.probe):
            credit -= 1.0
            if plan.measures_cell:
                self._measured(plan.backend, plan, now, since)
        self._credit[plan.profile] = credit

    def _measured(self, backend: str, plan: ExplorationPlan, now: float, since: float) -> None:
        """`backend`'s cell of the plan's profile was explored now, by the request or by its probes."""
        for _ in range(max(1, plan.probes)):  # each probe is one of the cell's measurements
            self._remember(backend, plan.profile, now, since)
        if plan.probe:  # measured now, though the request went elsewhere: the cell's age restarts
            booked, _ = self._booked[plan.profile]
            self._send(backend, plan.profile, booked, now)

    def _count(self, profile: str, backend: str, now: float) -> None:
        booked, started = self._booked.get(profile, (0, now))
        if profile not in self._booked and len(self._booked) >= self.max_cells:
            del self._booked[next(iter(self._booked))]
        self._booked[profile] = (booked + 1, started)
        self._send(backend, profile, booked + 1, now)

    def _send(self, backend: str, profile: str, index: int, now: float) -> None:
        """A send to the cell: the `index`-th request of its profile, at `now`."""
        key = (backend, profile)
        sends = self._routed.get(key)
        if sends is None:
            if len(self._routed) >= self.max_cells:
                del self._routed[next(iter(self._routed))]
            sends = self._routed[key] = deque(maxlen=KEPT_SENDS)
        sends.append((index, now))

    def _remember(self, backend: str, profile: str, now: float, since: float) -> None:
        key = (backend, profile)
        sent = self._sent.get(key)
        if sent is None:
            if len(self._sent) >= self.max_cells:
                del self._sent[next(iter(self._sent))]
            sent = self._sent[key] = deque()
        while sent and sent[0] < since:
            sent.popleft()
        sent.append(now)


def exploration_unit(
    profile: str, repetition: float, cells: Mapping[str, CellView]
) -> tuple[str, dict[str, CellView]]:
    """What a request's exploration measures: its profile's cells, or for repetitive content the same
    cells counted by their repetitive samples only, paced and aged apart (the ledger's key "<profile>
    (repetitive)"), so a speculative engine's decode speed is learned for both kinds of content."""
    if not repetitive(repetition):
        return profile, dict(cells)
    counted = {
        name: replace(cell, count=cell.model.content_samples[1], errors=0) for name, cell in cells.items()
    }
    return f"{profile} (repetitive)", counted


def blind_bound(knobs: Adaptive) -> int:
    """Requests of a profile after which a cell still short of min_samples is measured whatever the
    contention: the min_samples / epsilon an uncontended exploration takes, at most the refresh bound."""
    rate = min(max(knobs.explore_epsilon, 0.0), MAX_EPSILON)
    paced = math.ceil(knobs.min_samples / rate) if rate > 0 else knobs.refresh_requests
    return max(1, min(paced, knobs.refresh_requests))
