"""An engine-wide slow-down factor: how much slower a backend is now than its fits predict, from what its
requests show, finished and still in flight, whatever their profile (docs/measurement.md, section 8).

Per-profile fits notice a slow-down only from finished requests, and each profile on its own
(regime.current_regime: CHANGE_RUN of its samples beyond the fit). On a backend serving long answers that
is a minute or more after the fact, and every profile pays its own rediscovery. Yet a slowed engine shows
at once in what it is doing: its streams relay content at a slower pace, its waiting requests wait longer
than predicted. So, per backend, pure functions on plain data:

- Decode pace. Each (backend, profile) cell's finished streams give a fit of their mean gap between
  content frames (ITL) against load (c, device share); per profile, because a step over long prompts' KV
  takes longer. Frames, not tokens, on both sides: a speculative engine sends several tokens per frame.
  A stream in flight with MIN_FRAMES frames: its newest gaps / its profile's fit at the load now (the
  backend's in-flight count, never below the load it met at dispatch; whether a device neighbour is busy
  now).
- Waiting. A request with no content yet, waiting longer than its profile's predicted TTFT, is at least
  elapsed / predicted slower (a stream); a whole (non-streamed) one, elapsed / predicted e2e. A shorter
  wait says nothing yet and is left out.

- Finished. When fewer than MIN_EVIDENCE requests in flight say something (the traffic has left the
  backend, or it serves a few at a time), the newest finished streams of its profiles make up the rest:
  each one's mean gap / its profile's fit at the load it met, newest first. So the factor holds once
  traffic has moved away (what moved it is then finished), until the fits have taken the slow answers in.

Every ratio is taken against a fit at the device share the request met, so contention that device_share
already explains is not counted twice, and only at a load (c, device share) its profile's finished streams
already covered, as the regime check does: a fit need not extrapolate to a burst it never measured, and a
request slower there is not a slow-down. The live factor is the median of the ratios over every profile,
once there are at least MIN_EVIDENCE, and only from SLOWED up: a single slow request, or a few slow steps,
is not a slow-down; the median needs half the evidence slow.

What the fits already hold is not counted again: once CHANGE_RUN finished streams of a profile left its
decode fit, the fit restarts from them (that profile's live ratios fall back to 1) and the cell's `shift`
says by how much it moved. The backend's largest shift scales every cell whose own fit has not changed
regime (it predates the change), so one profile's evidence moves them all; a cell that changed is not
scaled again. A backend's predictions for every profile are multiplied by `for_cell` of their cell.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import zip_longest

from gateway.records import Progress, Sample
from gateway.routing.cells import CellModel
from gateway.routing.fitting import Fit, LoadPoint
from gateway.routing.regime import SHARE_MARGIN, current_regime, expect, regime_shift

# Ratios the live factor needs: fewer could be one odd request and its neighbours' noise.
MIN_EVIDENCE = 5
# The median ratio from which a backend counts as slowed: half again what its fits predict is beyond the
# spread of one engine's frame pace at a given load (a neighbour's prefill chunk lengthens a few steps,
# not the median), and well inside the 2x and more a throttled or misconfigured engine shows.
SLOWED = 1.5
# A stream's pace is read once it has this many content frames (two gaps): its first gap is often the
# prefill of a neighbour's request.
MIN_FRAMES = 3


@dataclass(frozen=True, slots=True)
class DecodePace:
    """A cell's decode pace from its finished streams: the fit of frame gaps against load, how far its
    current regime moved from the one before (`shift`), and its newest streams' gaps over the fit."""

    fit: Fit | None = None
    shift: float = 1.0
    newest: tuple[float, ...] = ()  # newest first, at most MIN_EVIDENCE
    c_high: float = 0.0  # the highest load its streams met
    shares: tuple[float, float] = (0.0, 0.0)  # the lowest and highest device share they met

    def covers(self, concurrency: float, share: float) -> bool:
        """Whether its streams met this load (within SHARE_MARGIN of the shares they met)."""
        low, high = self.shares
        return concurrency <= self.c_high and low - SHARE_MARGIN <= share <= high + SHARE_MARGIN


@dataclass(frozen=True, slots=True)
class Slowdown:
    """How much slower a backend is than its fits predict: `live` from what its requests show now,
    `shift` the largest move of one of its profiles' decode fits (applied to the cells that predate it)."""

    live: float = 1.0
    shift: float = 1.0
    evidence: int = 0  # ratios behind `live`
    slow: int = 0  # of which at or above SLOWED

    def for_cell(self, model: CellModel) -> float:
        """The factor a cell's predictions take: the live part, and the shift unless its own fit changed."""
        return self.live * (self.shift if model.regime_run <= 0 else 1.0)

    def describe(self, model: CellModel) -> str | None:
        factor = self.for_cell(model)
        if factor <= 1.0:
            return None
        parts = []
        if self.live > 1.0:
            parts.append(f"median of {self.evidence} requests in flight and newest {self.live:.2g}x the fits")
        if factor > self.live:
            parts.append(f"a profile's decode fit moved {self.shift:.2g}x since this one was measured")
        return f"engine slowed {factor:.2g}x ({'; '.join(parts)})"


def itl_points(samples: Sequence[Sample]) -> list[LoadPoint]:
    """(c, device share, mean frame gap) of the successful streamed samples, oldest first."""
    return [
        (float(s.concurrency), s.device_share, s.mean_itl)
        for s in samples
        if not s.error and s.mean_itl is not None and s.mean_itl > 0
    ]


def decode_pace(samples: Sequence[Sample]) -> DecodePace:
    """The decode pace of one cell's samples (oldest first)."""
    points = itl_points(samples)
    fit, _ = current_regime(points)
    if fit is None:
        return DecodePace()
    newest = tuple(y / e for c, z, y in reversed(points[-MIN_EVIDENCE:]) if (e := expect(fit, c, z)) > 0)
    shares = (min(z for _, z, _ in points), max(z for _, z, _ in points))
    return DecodePace(fit, regime_shift(points), newest, max(c for c, _, _ in points), shares)


def scaled(model: CellModel, factor: float) -> CellModel:
    """The cell's model with every predicted time `factor` times longer."""
    if factor == 1.0:
        return model

    def grow(fit: Fit | None) -> Fit | None:
        if fit is None:
            return None
        return replace(
            fit,
            intercept=fit.intercept * factor,
            slope=fit.slope * factor,
            floor=fit.floor * factor,
            contention=fit.contention * factor,
        )

    novel, repetitive = model.tpot_by_content
    return replace(
        model,
        ttft=grow(model.ttft),
        tpot=grow(model.tpot),
        tpot_by_content=(grow(novel), grow(repetitive)),
        mean_e2e=model.mean_e2e * factor,
    )


def engine_slowdown(
    progress: Progress,
    profiles: Sequence[str],
    cell: Callable[[str], CellModel | None],
    pace: Callable[[str], DecodePace],
    *,
    device_busy: bool,
    min_samples: int,
) -> Slowdown:
    """The backend's slow-down from its requests in flight (`progress`), and the model and decode pace of
    each profile's cell (`cell(profile)`, None when unknown; `pace(profile)`), `profiles` being those it is
    known to serve, the one being decided first (for the shift and the newest finished), as the module
    docstring says."""
    paces = [pace(p) for p in profiles]
    shift = max((p.shift for p in paces), default=1.0)
    ratios = live_ratios(progress, cell, pace, shift, device_busy=device_busy, min_samples=min_samples)
    if len(ratios) < MIN_EVIDENCE:  # the newest finished of each profile in turn make up the rest
        finished = [r for rank in zip_longest(*(p.newest for p in paces)) for r in rank if r is not None]
        ratios += finished[: MIN_EVIDENCE - len(ratios)]
    slow = sum(1 for r in ratios if r >= SLOWED)
    live = _median(ratios) if len(ratios) >= MIN_EVIDENCE else 1.0
    return Slowdown(live if live >= SLOWED else 1.0, shift, len(ratios), slow)


def live_ratios(
    progress: Progress,
    cell: Callable[[str], CellModel | None],
    pace: Callable[[str], DecodePace],
    shift: float,
    *,
    device_busy: bool,
    min_samples: int,
) -> list[float]:
    """Observed / predicted for each request in flight that says something yet (see the module docstring);
    a cell that predates the backend's `shift` predicts with it."""
    ratios: list[float] = []
    busy_now = 1.0 if device_busy else 0.0
    for r in progress.requests:
        model = cell(r.profile)
        if model is None or model.samples < min_samples:
            continue
        factor = shift if model.regime_run <= 0 else 1.0  # what the fits hold already
        paced = pace(r.profile)
        if r.recent_itl_s is not None and r.frames >= MIN_FRAMES:
            load = max(progress.inflight, r.concurrency)
            fit = paced.fit if paced.covers(load, busy_now) else None  # a load never measured: no fit
            if fit is not None and (expected := expect(fit, load, busy_now) * factor) > 0:
                ratios.append(r.recent_itl_s / expected)
            continue
        if r.first_content_s is not None or model.ttft is None:
            continue  # content has started: too little of it to read a pace
        if not paced.covers(r.concurrency, r.device_share):
            continue
        predicted = expect(model.ttft, r.concurrency, r.device_share)
        if not r.stream and model.tpot is not None:
            predicted += model.mean_output_tokens * expect(model.tpot, r.concurrency, r.device_share)
        predicted *= factor
        if predicted > 0 and r.elapsed_s > predicted:
            ratios.append(r.elapsed_s / predicted)  # a lower bound: it is still waiting
    return ratios


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
