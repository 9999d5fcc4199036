"""An engine-wide slow-down factor: how much slower a backend is now than its fits predict, from what its
requests show, finished and still in flight, whatever their profile (docs/measurement.md, section 8).

Per-profile fits notice a slow-down only from finished requests, and each profile on its own
(regime.current_regime: CHANGE_RUN of its samples beyond the fit). On a backend serving long answers that
is a minute or more after the fact, and every profile pays its own rediscovery. Yet a slowed engine shows
at once in what it is doing: its streams relay content at a slower pace, its waiting requests wait longer
than predicted. So, per backend, pure functions on plain data:

- Decode pace. Each (backend, profile) cell's finished streams give a fit of their gap between content
  frames (ITL) against load (c, device share); per profile, because a step over long prompts' KV takes
  longer. The load is the one a stream decoded at, its mean in-flight count over its life, not the one it
  met at dispatch (`itl_points`). A stream's gap is its mean without the longest tenth
  (`Sample.trimmed_itl`): the whole mean also takes in the few long steps that ran the prefill of requests
  arriving beside it, so a closed loop of 8k-token prompts read 1.8x slower than the short prompts before
  it on a healthy engine (spark-home-35b), a shift that then scaled every cell of the engine. Frames, not
  tokens, on both sides: a speculative engine sends several tokens per frame.
  A stream in flight with MIN_FRAMES frames: its newest gaps / its profile's fit at the load now (the
  backend's in-flight count, never below the load it met at dispatch) and at the device share it has met
  so far. Not whether a neighbour is busy at this instant: the newest gaps were served over the last
  seconds, and a neighbour that has just taken its first request would read the whole pace as contended
  (traffic leaving a slowed engine would hide the slow-down it is leaving for). Nor from gaps served
  while a wave of requests arrived at the backend (MAX_ARRIVALS): their prefill ran in those steps.
  At a load its fits never met, a stream is read against its own pace instead: its newest gaps over its
  mean gap since its first content, when no request joined the backend since then and its device's
  other engines were no busier lately (`unmeasured_load_change`): its load only fell, so a slower pace
  is the engine's. A throttle during the first burst at a new load shows there and nowhere else.
  The fit is that of the profile's streams before its newest MIN_EVIDENCE (`DecodePace.reference`), as
  for the newest finished below: a few slowed answers, short of a regime change, pull a fit of all of
  them toward themselves at the load they met, and the streams in flight there read on it.
- Waiting. A request with no content yet, waiting longer than its profile's predicted TTFT, is at least
  elapsed / predicted slower (a stream); a whole (non-streamed) one, elapsed / predicted e2e. A shorter
  wait says nothing yet and is left out. The predicted TTFT grows with the prompt tokens it waits behind
  (`prefill_scale`): requests sent together wait for each other's prefill, which a fit of loads cannot see.

- Finished. When fewer than MIN_EVIDENCE requests in flight say something (the traffic has left the backend,
  or it serves a few at a time), the newest finished streams of its profiles make up the rest: each one's
  gap / the fit of its profile's streams before the newest MIN_EVIDENCE at the load it decoded at, newest
  first; only one at a load that fit covered (a burst's first request is sent at a load of one and decodes
  at sixteen). So the factor holds once traffic has moved away (what moved it is then finished), until
  the fits have taken the slow answers in.

Every ratio is taken against a fit at the device share the request met, so contention that device_share
already explains is not counted twice, and only at a load (c, device share) its profile's finished streams
already covered, as the regime check does: a fit need not extrapolate to a burst it never measured, and a
request slower there is not a slow-down. The live factor is the median of the ratios over every profile,
once there are at least MIN_EVIDENCE, and only from SLOWED up: a single slow request, or a few slow steps,
is not a slow-down; the median needs half the evidence slow.

A slow-down seen is held until requests say otherwise (`held`): once the live factor is found, it stays while
fewer than MIN_EVIDENCE requests in flight say anything, for as long as a request sent when it was last
seen takes at the slowed pace (the longest mean e2e of its profiles' cells x the factor). Requests in flight
say nothing when they run at a load their fits never met (the traffic that left the engine now keeps its
device neighbour busy), and the newest finished streams were partly served before the slow-down: without
the hold the factor would come and go with every request the neighbour takes, and traffic with it. Past the
hold, the newest finished streams (by then served slow) speak again.

What the fits already hold is not counted again: once CHANGE_RUN finished streams of a profile left its
decode fit, the fit restarts from them (that profile's live ratios fall back to 1) and the cell's `shift`
says by how much it moved. That regime holds until a run of streams goes the other way (regime.regimes):
one stream at the old pace (a lone request beside a busy neighbour) does not hand the fit back. The backend's
largest shift scales every cell whose own fit has not changed regime (it predates the change), so one
profile's evidence moves them all; a cell that changed is not scaled again. A backend's predictions for
every profile are multiplied by `for_cell` of their cell.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import zip_longest

from gateway.records import InFlight, Progress, Sample
from gateway.routing.model.cells import CellModel
from gateway.routing.model.fitting import Fit, LoadPoint, fit_load
from gateway.routing.model.regime import CHANGE_RUN, SHARE_MARGIN, expect, regime_shift, regimes

# Ratios the live factor needs: fewer could be one odd request and its neighbours' noise.
MIN_EVIDENCE = 5
# The median ratio from which a backend counts as slowed: half again what its fits predict is beyond the
# spread of one engine's frame pace at a given load (a neighbour's prefill chunk lengthens a few steps,
# not the median), and well inside the 2x and more a throttled or misconfigured engine shows.
SLOWED = 1.5
# How far finished streams must leave their decode-pace fit for it to restart (regime.current_regime):
# the live threshold, where the regime check of TTFT and TPOT uses 2x. A 2.5x throttled engine beside a
# busy neighbour reads 1.6-1.8x (the neighbour's share of each step is not slowed with it).
PACE_CHANGE = 1.5
# A stream's pace is read once it has this many content frames: twice the newest gaps its pace is taken
# from (stats/progress.RECENT_GAPS), so they are clear of its first steps, which a burst arriving with it
# lengthens by the prefill of every request behind it (read at three frames, a burst of 16 on a healthy
# engine looked 3-5x slower than its fits).
MIN_FRAMES = 32
# A stream's newest gaps (16 of them: stats/progress.RECENT_GAPS) say nothing of the decode pace once this
# many requests arrived at its backend while they were served: each one's prefill lengthens a step or more
# (a burst, or the next wave of a closed loop, read 1.6-2.4x a healthy engine's fit), and their median
# moves once half the steps are lengthened; a quarter leaves room for prompts prefilled over two steps.
MAX_ARRIVALS = 4


@dataclass(frozen=True, slots=True)
class DecodePace:
    """A cell's decode pace from its finished streams: the fit of frame gaps against load, how far its
    current regime moved from the one before (`shift`), and its newest streams' gaps over the fit."""

    fit: Fit | None = None
    shift: float = 1.0
    newest: tuple[float, ...] = ()  # newest first, at most MIN_EVIDENCE
    c_high: float = 0.0  # the highest load its streams met that the fit rests on (`load_reach`)
    shares: tuple[float, float] = (0.0, 0.0)  # the lowest and highest device share they met
    # The pace of the regime's streams before its newest MIN_EVIDENCE (None: too few before them, the
    # pace itself serves): what streams in flight and the newest finished are read against.
    before_newest: DecodePace | None = None

    @property
    def reference(self) -> DecodePace:
        return self.before_newest or self

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
    held_until: float = 0.0  # the windows' clock: until then `live` holds without fresh evidence

    @property
    def factor(self) -> float:
        """How many times slower than its fits the engine runs, live and shifted together."""
        return self.live * self.shift

    def beyond(self, tolerance: float) -> bool:
        """Whether the engine runs slower than its fits by more than `tolerance`."""
        return self.factor > 1.0 + tolerance

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
    """(c, device share, frame gap) of the successful streamed samples, oldest first: the trimmed mean gap
    (the whole mean where a sample has none: restored from an older snapshot), against the load it decoded
    at, its mean load over its life (Sample.mean_load), or its load at dispatch if that was higher or is
    all that is known. Not the load at dispatch alone: a burst's first requests are sent at one to five
    and decode at fifteen, and fitted at their dispatch they flattened the fit's slope so far that at
    fourteen it predicted 0.058 s a frame where the 16-user round had measured 0.109 s at sixteen
    (spark-home-35b), and every stream of the next burst read as an engine slowed 2x."""
    points = []
    for s in samples:
        gap = s.trimmed_itl if s.trimmed_itl is not None else s.mean_itl
        if not s.error and gap is not None and gap > 0:
            points.append((max(float(s.concurrency), s.mean_load or 0.0), s.device_share, gap))
    return points


def decode_pace(samples: Sequence[Sample]) -> DecodePace:
    """The decode pace of one cell's samples (oldest first)."""
    points = itl_points(samples)
    found = regimes(points, factor=PACE_CHANGE)
    start = found[-1][0]
    regime = points[start:]
    fit = fit_load(regime)
    if fit is None:
        return DecodePace()
    pace = _reaching(fit, points, regime_shift(points, found))
    older = regime[:-MIN_EVIDENCE]
    if len(older) >= CHANGE_RUN and (before := fit_load(older)) is not None:
        pace = replace(pace, before_newest=_reaching(before, older))
    return replace(pace, newest=newest_ratios(regime, pace))


def _reaching(fit: Fit, points: Sequence[LoadPoint], shift: float = 1.0) -> DecodePace:
    """A pace of `fit` covering the loads (`load_reach`) and device shares `points` met."""
    shares = (min(z for _, z, _ in points), max(z for _, z, _ in points))
    return DecodePace(fit, shift, c_high=load_reach(sorted(c for c, _, _ in points)), shares=shares)


def load_reach(loads: Sequence[float]) -> float:
    """The highest of `loads` (ascending) a line through them rests on: the highest with at least two of
    the loads up to it in the upper half of the span from the lowest. One stream at the top is a line's
    end, not a measured load: six streams at one and one at four, a long prompt partly served throttled,
    put 0.107 s a frame at three, and the throttled engine's next stream there (0.164 s, twice its own
    early pace) read 1.5x, under the 2x of the rest of the evidence (degrade-early, a one-Spark pair
    throttled 2x in its 4-user phase). Streams spread over the loads reach the top."""
    low = loads[0]
    for i in range(len(loads) - 1, 0, -1):
        if sum(1 for c in loads[: i + 1] if c > (low + loads[i]) / 2) >= 2:
            return loads[i]
    return low


def newest_ratios(regime: Sequence[LoadPoint], pace: DecodePace) -> tuple[float, ...]:
    """The newest MIN_EVIDENCE streams' gaps over what the regime's streams before them predict (newest
    first), at loads those covered (`pace.reference`); with too few before them, over the regime's own
    fit. Against a fit they are part of, slow answers after a slow-down too small for a regime change would
    pull the fit toward themselves and read as nearly on it. A stream counts only if the load it decoded at
    (its point's, itl_points) was covered: the first requests of a burst are sent at a load of one or two
    and decode at sixteen, and read against the fit at their dispatch they looked 1.8x slow on a healthy
    engine (spark-duo-35b's mixed phase), which moved the burst's traffic to its neighbour."""
    reach = pace.reference
    fit = reach.fit
    if fit is None:
        return ()
    newest = reversed(regime[-MIN_EVIDENCE:])
    return tuple(y / e for c, z, y in newest if reach.covers(c, z) and (e := expect(fit, c, z)) > 0)


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
    min_samples: int,
    at: float = 0.0,
    before: Slowdown | None = None,
) -> Slowdown:
    """The backend's slow-down from its requests in flight (`progress`), and the model and decode pace of
    each profile's cell (`cell(profile)`, None when unknown; `pace(profile)`), `profiles` being those it is
    known to serve, the one being decided first (for the shift and the newest finished), as the module
    docstring says; `before` is the last one found, `at` the windows' clock now."""
    paces = [pace(p) for p in profiles]
    shift = max((p.shift for p in paces), default=1.0)
    ratios = live_ratios(progress, cell, pace, shift, min_samples=min_samples)
    fresh = len(ratios) >= MIN_EVIDENCE
    if before is not None and not fresh and held(before, shift, at):
        return replace(before, shift=shift)
    if not fresh:  # the newest finished of each profile in turn make up the rest
        finished = [r for rank in zip_longest(*(p.newest for p in paces)) for r in rank if r is not None]
        ratios += finished[: MIN_EVIDENCE - len(ratios)]
    slow = sum(1 for r in ratios if r >= SLOWED)
    live = _median(ratios) if len(ratios) >= MIN_EVIDENCE else 1.0
    if live < SLOWED:
        return Slowdown(1.0, shift, len(ratios), slow)
    models = [m for p in profiles if (m := cell(p)) is not None]
    hold = live * max((m.mean_e2e for m in models), default=0.0)
    return Slowdown(live, shift, len(ratios), slow, held_until=at + hold)


def held(before: Slowdown, shift: float, at: float) -> bool:
    """Whether `before`'s live factor still holds without fresh evidence: it was a slow-down, its hold has
    not run out, and no fit has taken a slow-down in since (a larger shift: the fits now predict it)."""
    return before.live > 1.0 and at < before.held_until and shift <= before.shift


def live_ratios(
    progress: Progress,
    cell: Callable[[str], CellModel | None],
    pace: Callable[[str], DecodePace],
    shift: float,
    *,
    min_samples: int,
    decode_only: bool = False,
) -> list[float]:
    """Observed / predicted for each request in flight that says something yet (see the module docstring);
    a cell that predates the backend's `shift` predicts with it. `decode_only`: only streams read at their
    decode pace, not requests still waiting for a first token (a queue is the load, not the engine's pace)."""
    ratios: list[float] = []
    ahead = queued_prompt_tokens(progress)
    youngest = min((r.elapsed_s for r in progress.requests), default=0.0)
    for r in progress.requests:
        model = cell(r.profile)
        if model is None or model.samples < min_samples:
            # No fit to read it on: its own pace still tells a change that came while it ran.
            change = unmeasured_load_change(r, youngest) if r.recent_arrivals < MAX_ARRIVALS else None
            if change is not None:
                ratios.append(change)
            continue
        factor = shift if model.regime_run <= 0 else 1.0  # what the fits hold already
        # Not against the newest finished: four slowed streams at the top load, one short of a regime
        # change, pulled the fit there so far that fifteen slowed streams in flight read on it.
        paced = pace(r.profile).reference
        if r.recent_itl_s is not None and r.frames >= MIN_FRAMES:
            if r.recent_arrivals >= MAX_ARRIVALS:
                continue  # its newest steps ran the newcomers' prefill
            load = max(progress.inflight, r.concurrency)
            share = r.device_share if r.recent_share is None else r.recent_share  # what its gaps met
            fit = paced.fit if paced.covers(load, share) else None  # a load never measured: no fit
            if fit is not None and (expected := expect(fit, load, share) * factor) > 0:
                ratios.append(r.recent_itl_s / expected)
            elif fit is None and (change := unmeasured_load_change(r, youngest)) is not None:
                ratios.append(change)
            continue
        if decode_only or r.first_content_s is not None or model.ttft is None:
            continue  # content has started: too little of it to read a pace
        if not paced.covers(r.concurrency, r.device_share):
            continue
        queued = ahead.get(r.elapsed_s, 0)
        predicted = expect(model.ttft, r.concurrency, r.device_share) * prefill_scale(model, queued)
        if not r.stream and model.tpot is not None:
            predicted += model.mean_output_tokens * expect(model.tpot, r.concurrency, r.device_share)
        predicted *= factor
        if predicted > 0 and r.elapsed_s > predicted:
            ratios.append(r.elapsed_s / predicted)  # a lower bound: it is still waiting
    return ratios


def pace_change(r: InFlight, early: bool = False) -> float | None:
    """A stream's newest gaps over its pace before them (None: not read at its pace yet, MIN_FRAMES):
    about 1 at a steady pace, above after a slow-down that came while it ran. Its pace before is its
    mean gap since its first content, or with `early` its early gaps' (InFlight.early_itl_s) where it
    has them: the mean takes in the slowed gaps too and reads a change early in a long stream at a
    fraction of it, while the early gaps are of the load then, so they serve only where nothing has
    joined the backend since (`unmeasured_load_change`): read so for every stream under way,
    spark-home-35b's long answers, sent one after another, read their own batch growing as a
    slow-down."""
    if r.recent_itl_s is None or r.first_content_s is None or r.frames < MIN_FRAMES:
        return None
    before = r.early_itl_s if early else None
    if before is None:
        before = (r.elapsed_s - r.first_content_s) / (r.frames - 1)
    return r.recent_itl_s / before if before > 0 else None


def unmeasured_load_change(r: InFlight, youngest_s: float) -> float | None:
    """What a stream at a load its fits never met says of its engine: its own pace change, if nothing
    joined the backend since its first content (the youngest request in flight, `youngest_s` old, was
    sent before it) and its device's other engines were no busier lately than over its life. Its load
    only fell since its content began, so a slower pace is the engine's. Without this, a slow-down during
    the first burst at a new load went unseen until the burst finished: spark-home-35b's q475-dflash,
    throttled 2.5x 19 s into its first 16-user round, kept its traffic for 90 s."""
    if r.first_content_s is None or youngest_s < r.elapsed_s - r.first_content_s:
        return None
    if r.recent_share is not None and r.recent_share > r.device_share + SHARE_MARGIN:
        return None
    return pace_change(r, early=True)


def queued_prompt_tokens(progress: Progress) -> dict[float, int]:
    """Per time since dispatch of a request with no content yet, the prompt tokens it waits behind for its
    first token, its own included: those of the backend's requests with no content yet sent no later than
    it (estimated; 0: unknown). One pass over the view, oldest first."""
    ahead: dict[float, int] = {}
    total = 0
    for r in sorted((r for r in progress.requests if r.first_content_s is None), key=lambda r: -r.elapsed_s):
        total += r.prompt_tokens
        ahead[r.elapsed_s] = total  # requests sent at the same instant wait behind each other alike
    return ahead


def prefill_scale(model: CellModel, queued_tokens: int) -> float:
    """How many times the cell's fitted wait for a first token a request may take behind `queued_tokens`
    of prompts (queued_prompt_tokens): their sum over the cell's mean prompt, when more. The TTFT fit
    knows loads, not prompts: three 2.6k-token prompts arriving together in a profile whose fit was
    measured one arrival at a time wait for each other's prefill, and read as an engine slowed 2.4x."""
    if queued_tokens <= 0 or model.mean_prompt_tokens <= 0:
        return 1.0
    return max(1.0, queued_tokens / model.mean_prompt_tokens)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
