"""The adaptive objective scorer: rank backends by the predicted outcome of this request, from live samples.

For every eligible backend, routing/model/predict.py predicts the profile's objective at the load the request
would join (c = its own in-flight + 1, counted from dispatch, so a burst of arrivals sees each earlier one
and the router does not herd; and whether another backend of its device is busy): TTFT for `ttft`, TTFT +
requested output tokens x TPOT for `e2e`, 1 / TPOT for `tokens_per_second`. A request also slows down the
requests already in flight on its device: its own backend's batch grows, and a neighbour shares the
memory bandwidth for as long as this request keeps its engine busy beyond the requests already there. That
extra time (harm.device_harm) is part of the cost:

    cost = own objective + harm                       ttft, e2e (seconds)
    tok/s = out / (out * TPOT + wait + harm)          tokens_per_second (1 / TPOT on an idle engine)
    wait  = TTFT(c) - TTFT(lowest c measured) + queue (the engine's report, or c beyond its sequence limit)
    harm = own batch + neighbours
    own batch  = n_i * min(r_i, D / TPOT_i') * (TPOT_i(n_i + 1) - TPOT_i(n_i))
    neighbour  = n_j * min(r_j, X / TPOT_j') * (TPOT_j(n_j, busy) - TPOT_j(n_j, alone))   per busy j != i
    X          = max(0, D - E_i * n_i / (n_i + 1))    (n_i = 0: X = D, the request wakes engine i)
           (D: this request's predicted e2e on engine i; E_i: i's mean e2e, so E_i * n_i / (n_i + 1) is the
           expected longest remaining time of its n_i in-flight requests; r_j: half j's mean output;
           TPOT_j': j's TPOT with this request in place; the busy/alone gap is learned from device_share)

so a request that starts, or prolongs, one engine's busy period next to a busy one wins only when its own
gain outweighs what the contention costs the other. The harm is myopic, so it decides how traffic mixes,
not which engine it piles onto: a busy neighbour is not charged for when the candidate, with the device's
whole load on it alone, beats the neighbour alone at that load by more than `tolerance`
(shared_device.charged). Nor does the harm split a device's load: the engine with the most requests in
flight holds its device, and another engine of it takes the request only when its steady state beats the
holder's by more than half the tolerance (shared_device.holders; one claimed beyond the loads it measured
is carried there along the holder's fit, shared_device.claims), else it scores 0 and the holder the
better of the two. Devices come from `backends[].device`; a backend without one is a device of its own.
The window's error rate (failovers included) turns the value into the cost per *successful* request (a
backend that fails half its requests takes twice as long per answer); a shared device's steady states
count its failures retried beside it (shared_device.failover_share).
Scores are then normalised across candidates:

    gap_i   = how much worse than the best, relative: v_i / best - 1 (lower is better) or best / v_i - 1
    norm_i  = 1 - gap_i / max(max gap, tolerance)        1 for the best; 0 only for a gap >= tolerance
    score_i = 0.25 + 0.75 * norm_i                       any prediction ranks above no prediction
    no prediction yet (fewer than min_samples):  0.2 * prior_i

The prior is the policy's `prefer` order (the preference scorer's formula): with no predictions at all the
scores *are* the prior, so a fresh gateway routes like the static policy and measurements take over cell by
cell. An engine seen slower than its own fits by more than `tolerance` (routing/slowdown/reading.py), now or
within `refresh_s` or the windows' span, the longer (routing/slowdown/episodes.py), is ranked after the others
in the prior (verdict.demoted): the prefer order speaks of healthy engines, and a profile never measured would
otherwise follow it onto a throttled one. `tolerance` keeps noise from flipping decisions: a 5 % gap moves the
score by 0.15, not by 1. A backend whose cell is still under min_samples may be predicted with a borrowed
model (routing/model/model_choice.py: the peer's model times its decode ratio beside a neighbour, its
all-profile fit for decode speed, each only where it measured the request's content). Still short, a backend
alone on its device is predicted with its best-measured peer's model at its own load (routing/model/peers.py):
not measured is not slower, so it takes load as least-in-flight would until its own min_samples answers speak
for it. With no backend measured at all and the preferred one running a batch, the backends alone on their
devices have their prior levelled (peers.levelled_prior): load ranks them, the prefer order breaks ties, so a
burst on a fresh profile is not all sent where the prefer order points.

Exploration (routing/explore/plan.py): while some backend other than the predicted winner is short of
min_samples for the profile, a paced share epsilon of its requests measures the least measured of them,
less often where it would slow a busy neighbour, and every request while the answers it gave so far
predict this one better than the winner (`_promising`: measuring it is expected to cost nothing); and
never blind: a cell past its age bound, or measured before another backend changed regime, is refreshed
at once.

Streams already running on an engine seen slowed beyond doubt (every stream it decodes slower than its
fits, since it changed pace under way: proxy/move_choice.py `moving_off`) are weighed too:
the stream mover's planner (proxy/move_planner.py, reading `slowdowns`) says which of them the engine their
request fails over to would finish sooner, prefill of what they wrote included, and proxy/moves.py cuts those
and has them continued there (proxy/resume.py).

Scoring changes no state: the slow-down memory it reads is written before, by `AdaptiveScorer.refresh`
(the router's producer step, routing/slowdown/memory.py), and a decision carries its exploration as a
plan (the credit the request adds, the backend it explores), which `AdaptiveScorer.book` applies when the
dispatcher sends the request, so an explanation (the same `decide`) or a request that is refused or never
sent spends nothing, and an exploration counts only if the request really went there. The caches it
fills (cell models, decode paces, counts) are keyed by the windows' versions: memoization only.
The knobs (min_samples, explore_epsilon, tolerance, contended_share) are
the policy's `adaptive` block (with refresh_requests and refresh_s), read per request, so a reload
applies to the next one.

routing/adaptive/verdict.py is the pure part (predictions in, scores and reasons out); `AdaptiveScorer`
gathers its inputs (cached fits over the caller's windows, the engine hints it is handed) and is the router's
objective scorer (scorers.CandidateScorer, named "objective"): evaluated once per request, over the backends
that serve now and those that could serve once back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from functools import cache, partial
from typing import Any

from gateway.policy.schema import MAX_EPSILON, Adaptive
from gateway.records import BackendSnapshot, EngineHint, ExplorationPlan
from gateway.routing.adaptive.verdict import Verdict, demoted, effective_value, verdict
from gateway.routing.explore.pacing import ExplorationLedger, exploration_unit
from gateway.routing.explore.plan import Explorer
from gateway.routing.explore.probes import probe_instead, probe_measures
from gateway.routing.model.cells import CellModel, CellView, ModelCache, Windows
from gateway.routing.model.harm import DeviceLoad
from gateway.routing.model.model_choice import ModelChoice, loads_met, own_content
from gateway.routing.model.peers import (
    Borrowed,
    borrowed_from_peers,
    carried_model,
    decodes_slower,
    levelled_prior,
    widest,
)
from gateway.routing.model.predict import PredictConfig, Prediction, predict_with_model
from gateway.routing.model.shared_device import (
    beats,
    charged,
    claims,
    device_members,
    holders,
    steady_states,
)
from gateway.routing.pipeline.context import RouteContext
from gateway.routing.pipeline.scorers import Assessment, PreferenceScorer
from gateway.routing.pipeline.spill import announced_capacity
from gateway.routing.slowdown.memory import EngineSlowdowns, InFlightProgress

# The engine's own report for a backend, or None (no scraper, not scraped, flavor without metrics).
EngineHints = Callable[[str], EngineHint | None]
# The steady-state gain, as a share of `tolerance`, that moves a shared device's traffic from the engine
# holding it to another (shared_device.holders): half, so seed 003's +24 % for MTP under stress moves it
# while a 5 % chat difference does not make the device flip between engines on noise.
HOLD_MARGIN = 0.5


class AdaptiveScorer:
    """Scorer "objective" for adaptive profiles. It reads the live windows and the engines' reports it is
    handed (`windows`, `hints`), takes its knobs from the policy in force (`ctx.adaptive`), and changes
    nothing while scoring: the exploration a decision would make comes back as a plan, applied by `book`
    once the request is sent."""

    name = "objective"

    def __init__(
        self,
        windows: Windows,
        *,
        hints: EngineHints | None = None,
        cache: ModelCache | None = None,
        devices: Mapping[str, str] | None = None,
        ledger: ExplorationLedger | None = None,
        explore: bool = True,
        progress: InFlightProgress | None = None,
        probes: bool = False,
    ) -> None:
        self.windows = windows
        self.hints = hints
        self.progress = progress  # None: finished requests are all it sees
        self.cache = cache or ModelCache(windows.max_cells)  # bounded like the windows
        # The models each decision predicts with, scaled by each backend's slow-down as of the decision
        # under way (also read by `_prediction` and the Explorer: `slowdowns`).
        self.models = ModelChoice(windows, self.cache, EngineSlowdowns(windows, self.cache, progress))
        self.devices = dict(devices or {})  # backend -> shared device; absent: a device of its own
        self.ledger = ledger or ExplorationLedger(windows.max_cells)
        self.explore = explore  # False: never explores
        self.probes = probes  # True: decode probes are sent for plans that ask (proxy/decode_probe.py)
        self._prior = PreferenceScorer()

    @property
    def slowdowns(self) -> EngineSlowdowns:
        """Each backend's slow-down as of the decision under way (the model choice's)."""
        return self.models.slowdowns

    def assess(
        self, ctx: RouteContext, now: Sequence[BackendSnapshot], later: Sequence[BackendSnapshot] = ()
    ) -> Assessment:
        """One evaluation per request: scores for the backends that serve now (with the exploration plan
        among them) and for those that could serve once back (`later`, as they will be then: the fallback
        order, never explored). The backends predicted are `priced`: their predictions count the queue
        they would make the request join, so the ranking is not spilled from them."""
        decided = self.decide(ctx, now)
        scores = dict(decided.scores)
        if later:
            scores.update(self._rank(ctx, later).scores)
        priced = frozenset(p.backend for p in decided.predictions if p.value is not None)
        predicted = {p.backend: (p.ttft, p.tpot) for p in decided.predictions if p.value is not None}
        return Assessment(scores, decided.plan, priced, predicted)

    def decide(self, ctx: RouteContext, backends: Sequence[BackendSnapshot]) -> Verdict:
        """The verdict over `backends`, the exploration due now included (as a plan: nothing is booked)."""
        at = self.windows.now()
        knobs = ctx.adaptive
        cells = {b.name: self.models.cell(b.name, ctx.profile.name, at, ctx.adaptive) for b in backends}
        device = self._device_loads(backends, at)
        decided = self._verdict(ctx, backends, cells, device)
        # A request answered in one piece shows no first token nor decode pace: sent to explore, it would
        # measure nothing, and non-streaming clients would pay a share of their requests for it forever.
        if not self.explore or knobs.explore_epsilon <= 0 or not backends or not ctx.features.stream:
            return decided
        unit, measured = exploration_unit(ctx.profile.name, ctx.features.repetition, cells)
        explorer = Explorer(self.ledger, self.slowdowns, self.windows.max_age_s)
        promising = self._promising(ctx, backends, cells, device, decided)
        winner = max(decided.scores, key=decided.scores.__getitem__, default=None)
        # An engine holding its device takes the request itself (Explorer.plan): no probe stands for it
        held = [
            name
            for name in explorer.held(unit, knobs, measured, winner, device, at)
            if not _clearly_beaten(decided, name, winner, ctx.profile.objective, knobs.tolerance)
        ]

        @cache  # read only for a cell the probes could stand for, and once: it takes two engines' models
        def slower(name: str) -> bool | None:
            return self._decodes_slower(ctx, name, winner, at)

        probed = [
            name
            for name in cells
            if self.probes
            and name not in held
            and probe_instead(ctx, cells, device, name, partial(slower, name))
        ]
        explored, plan = explorer.plan(unit, knobs, measured, decided, device, at, promising, probed, held)
        if explored is None:
            return replace(decided, plan=plan)
        if explored.backend in probed:
            probes = self._probes(explored.backend, knobs.min_samples, at)
            measures = probe_measures(ctx.profile.objective, slower(explored.backend))
            return replace(decided, plan=replace(plan, probes=probes, measures_cell=measures))
        errors = {name: cell.error_rate for name, cell in cells.items()}
        exploring = verdict(decided.predictions, errors, decided.prior, explored, knobs.tolerance)
        return replace(exploring, plan=plan)

    def _decodes_slower(self, ctx: RouteContext, name: str, winner: str | None, at: float) -> bool | None:
        """Whether `name`'s engine decodes slower than the winner's beyond the tolerance
        (peers.decodes_slower, on their all-profile models as remembered); None: not known, or no winner to
        compare with. Read for a ttft or e2e profile only, whose probes it gates (probes.probe_instead)."""
        if ctx.profile.objective == "tokens_per_second" or winner is None or winner == name:
            return None
        knobs = ctx.adaptive
        mine, theirs = self.models.engine(name, at, knobs), self.models.engine(winner, at, knobs)
        return decodes_slower(mine, theirs, knobs.min_samples, knobs.tolerance)

    def _probes(self, backend: str, min_samples: int, at: float) -> int:
        """Decode probes to plan for `backend`: as many as its all-profile fit lacks of min_samples, sent
        together, since a cell short of samples borrows that fit only once it holds them
        (model_choice.ModelChoice.choose); else one, to refresh it. One a decision left spark-duo-degrading's
        fp8-base unmeasured through a closed-loop 16-user round: four probes went out before every user
        waited on the throttled fp8-mtp, and the round's first two requests after the slow-down followed
        them there."""
        return max(1, min_samples - self.models.engine(backend, at).samples)

    def book(self, plan: ExplorationPlan, backend: str) -> None:
        """The dispatcher sent a request planned as `plan` to `backend`: apply the plan (pacing.py)."""
        at = self.windows.now()
        self.ledger.book(plan, backend, at, since=at - self.windows.max_age_s)

    def _verdict(
        self,
        ctx: RouteContext,
        backends: Sequence[BackendSnapshot],
        cells: Mapping[str, CellView],
        device: Mapping[str, Sequence[DeviceLoad]],
    ) -> Verdict:
        config = PredictConfig(min_samples=ctx.adaptive.min_samples)
        chosen = {b.name: self.models.choose(ctx, b, cells, _neighbours(b.name, device)) for b in backends}
        models = {
            name: own_content(model, cells[name].model, ctx.features.repetition, config.min_samples)
            for name, (model, _) in chosen.items()
        }
        errors = {name: cell.error_rate for name, cell in cells.items()}
        steady = steady_states(ctx, models, device, config, errors)
        borrowed = borrowed_from_peers(models, device, ctx.features.repetition, config.min_samples)
        guide = widest(models, config.min_samples)
        predictions = [
            self._prediction(
                ctx,
                b,
                models[b.name],
                charged(b.name, device[b.name], steady, ctx.adaptive.tolerance),
                config,
                self._unrefuted(ctx, b, models[b.name], device[b.name], borrowed.get(b.name)),
                guide if len(device[b.name]) == 1 else None,
                note=chosen[b.name][1],
            )
            for b in backends
        ]
        prior = demoted(self._prior.score(ctx, backends), self._slowed(backends, ctx.adaptive))
        prior = levelled_prior(prior, models, device, ctx.features.repetition, config.min_samples)
        held = holders(
            device,
            claims(ctx, models, device, steady, errors, config),
            higher_is_better=ctx.profile.objective == "tokens_per_second",
            margin=ctx.adaptive.tolerance * HOLD_MARGIN,
        )
        return verdict(predictions, errors, prior, None, ctx.adaptive.tolerance, held=held)

    def _unrefuted(
        self,
        ctx: RouteContext,
        backend: BackendSnapshot,
        model: CellModel,
        device: Sequence[DeviceLoad],
        borrowed: Borrowed | None,
    ) -> Borrowed | None:
        """`borrowed`, unless the backend's own answers so far (fewer than min_samples) predict this
        request worse than the peer's model does by more than `tolerance` (a few answers are noisy):
        "not measured is not slower" stands only until its answers say otherwise, and a backend seen
        five times slower would otherwise take load as its peer's equal until min_samples of its answers
        are back."""
        if borrowed is None or model.samples == 0:
            return borrowed
        assumed = self._early(ctx, backend, borrowed.model, borrowed.alone(device[0])).value
        own = self._early(ctx, backend, model, device).value
        if assumed is None or own is None:
            return borrowed
        margin = 1.0 + ctx.adaptive.tolerance
        higher = ctx.profile.objective == "tokens_per_second"
        worse = own * margin < assumed if higher else own > assumed * margin
        return None if worse else borrowed

    def _early(
        self, ctx: RouteContext, backend: BackendSnapshot, model: CellModel, device: Sequence[DeviceLoad]
    ) -> Prediction:
        """What `model` predicts for this request from however few answers it holds (at least one): too
        few to rank a backend, enough to say whether measuring it is cheap."""
        return self._prediction(ctx, backend, model, device, PredictConfig(min_samples=1))

    def _promising(
        self,
        ctx: RouteContext,
        backends: Sequence[BackendSnapshot],
        cells: Mapping[str, CellView],
        device: Mapping[str, Sequence[DeviceLoad]],
        decided: Verdict,
    ) -> list[str]:
        """The backends short of min_samples whose answers so far predict this request, at a load they
        met, better than the predicted winner (its prediction, or its own few answers while it has
        none): exploring one is expected to cost nothing, so it is not paced (plan.Explorer.plan).
        Too few answers to rank a backend are enough to say when measuring it is cheap: the prior alone
        would send a single user's requests to the engine it names until some engine holds min_samples
        answers."""
        winner = max(decided.scores, key=decided.scores.__getitem__, default=None)
        short = [
            b
            for b in backends
            if 0 < cells[b.name].model.samples < ctx.adaptive.min_samples
            and b.inflight + 1 <= loads_met(cells[b.name].model)
        ]
        if winner is None or not any(b.name != winner for b in short):
            return []

        def value(b: BackendSnapshot) -> float | None:
            guess = self._early(ctx, b, cells[b.name].model, device[b.name])
            return effective_value(guess, cells[b.name].error_rate)

        best = decided.costs.get(winner)
        if best is None:
            best = next((value(b) for b in backends if b.name == winner), None)
        if best is None:
            return []
        higher = ctx.profile.objective == "tokens_per_second"
        values = {b.name: value(b) for b in short if b.name != winner}
        return [n for n, v in values.items() if v is not None and (v > best if higher else v < best)]

    def _slowed(self, backends: Sequence[BackendSnapshot], knobs: Adaptive) -> set[str]:
        """The backends whose engine runs slower than its fits by over the tolerance, as of this decision
        or within the refresh bound's seconds or the windows' span (EngineSlowdowns.suspect)."""
        return {b.name for b in backends if self.slowdowns.suspect(b.name, knobs)}

    def _rank(self, ctx: RouteContext, backends: Sequence[BackendSnapshot]) -> Verdict:
        """The verdict over backends that serve only once back, without exploring them."""
        at = self.windows.now()
        cells = {b.name: self.models.cell(b.name, ctx.profile.name, at, ctx.adaptive) for b in backends}
        return self._verdict(ctx, backends, cells, self._device_loads(backends, at))

    def learn(self, profile: str, backends: Iterable[str]) -> None:
        """The producer's step as a request's samples arrive: the fits of `profile`'s cells, the all-profile
        fits and the decode paces of `backends` are rebuilt now, if their samples changed, rather than
        by the next decision to read them. A decision finds them cached (ModelCache, by the cells'
        versions); nothing a decision reads differs."""
        at = self.windows.now()
        for name in backends:
            self.cache.get(self.windows, name, profile, at)
            self.cache.backend(self.windows, name, at)
            self.slowdowns.pace(name, profile, at)

    def refresh(self, ctx: RouteContext, backends: Sequence[BackendSnapshot]) -> None:
        """The producer's step before a decision: each of `backends`' slow-downs read from its requests in
        flight at the windows' clock and remembered (EngineSlowdowns.refresh), the request's profile
        leading. The decision (`assess`, `decide`, `explain`) then only reads."""
        at = self.windows.now()
        for b in backends:
            self.slowdowns.refresh(b.name, ctx.profile.name, at)

    def explain(self, ctx: RouteContext, backends: Sequence[BackendSnapshot]) -> dict[str, Any]:
        """The predicted values behind the objective scores, and why the best one won: the decision `assess`
        makes, read the same way (its exploration stays a plan; nothing is booked)."""
        decided = self.decide(ctx, backends)
        under = [p.backend for p in decided.predictions if p.value is None]
        epsilon = ctx.adaptive.explore_epsilon
        rate, credit = min(epsilon, MAX_EPSILON), self.ledger.credit(ctx.profile.name)
        return {
            "objective": ctx.profile.objective,
            "why": decided.why,
            "exploration": None
            if not under or epsilon <= 0 or not self.explore
            else f"{rate:g} of requests (credit {credit:.2f}) toward the least measured: {', '.join(under)}",
            "predictions": [
                {
                    "backend": p.backend,
                    "concurrency": p.concurrency,
                    "samples": p.samples,
                    "ttft_s": p.ttft,
                    "tpot_s": p.tpot,
                    "device_busy": p.device_busy,
                    "own_value": p.own_value,
                    "harm_s": p.harm,
                    "harm_by_backend_s": dict(p.harm_by_backend),
                    "busy_extension_s": p.extension,
                    "value": p.value,
                    "effective_value": decided.costs.get(p.backend),
                    "prior": decided.prior.get(p.backend),
                    "score": decided.scores.get(p.backend),
                    "why": p.why,
                }
                for p in decided.predictions
            ],
        }

    def _prediction(
        self,
        ctx: RouteContext,
        backend: BackendSnapshot,
        model: CellModel,
        device: Sequence[DeviceLoad],
        config: PredictConfig,
        borrowed: Borrowed | None = None,
        guide: CellModel | None = None,
        note: str | None = None,
    ) -> Prediction:
        """`borrowed`: the peer's model stands for this backend's (routing/model/peers.py); `guide`: a model
        that saw higher loads, along which this one is carried beyond the loads it measured; `note`: where
        `model` came from, when not from the cell (model_choice.ModelChoice.choose)."""
        hint = self.hints(backend.name) if self.hints is not None else None
        me = next(d for d in device if d.backend == backend.name)
        used = model
        if borrowed is not None:
            used, device = borrowed.model, borrowed.alone(me)
        if guide is not None:
            used = carried_model(used, guide, backend.inflight + 1)
        prediction = predict_with_model(
            backend.name,
            used,
            inflight=backend.inflight,
            objective=ctx.profile.objective,
            max_output_tokens=ctx.features.max_output_tokens,
            hint=hint,
            config=config,
            device_busy=me.device_busy,
            device=device,
            repetition=ctx.features.repetition,
            capacity=backend.engine_capacity or backend.max_concurrency,
            prompt_tokens=ctx.features.prompt_tokens,
        )
        slowed = self.slowdowns.latest(backend.name)
        said = slowed.describe(model) if slowed is not None else None
        if borrowed is not None:
            said = borrowed.why(model.samples, config.min_samples)
        said = "; ".join(part for part in (note, said) if part) or None
        return prediction if said is None else replace(prediction, why=f"{prediction.why}; {said}")

    def _device_loads(self, backends: Sequence[BackendSnapshot], at: float) -> dict[str, list[DeviceLoad]]:
        """Per backend, its device's backends with their load and all-profile model (cached per backend)."""
        inflight = {b.name: b.inflight for b in backends}
        members = device_members(backends, self.devices)
        loads: dict[str, DeviceLoad] = {}
        for b in backends:
            others_busy = any(inflight[o] > 0 for o in members[b.name] if o != b.name)
            model = self.cache.backend(self.windows, b.name, at)
            loads[b.name] = DeviceLoad(b.name, b.inflight, others_busy, model, announced_capacity(b))
        return {b.name: [loads[o] for o in members[b.name]] for b in backends}


def _neighbours(backend: str, device: Mapping[str, Sequence[DeviceLoad]]) -> list[str]:
    """The other backends of `backend`'s device (none: a device of its own)."""
    return [d.backend for d in device[backend] if d.backend != backend]


def _clearly_beaten(
    decided: Verdict, backend: str, winner: str | None, objective: str, tolerance: float
) -> bool:
    """Whether the winner's prediction beats `backend`'s by more than `tolerance` (both predicted, harm
    and failures counted): then measuring `backend` with the request is not free, whatever it holds. A
    one-Spark pair's throttled engine, holding the device with a 4-user round of 8k-token prompts its
    cell had not yet 5 answers of, took the round's next requests at a third of the pace its idle
    neighbour was predicted at."""
    if winner is None or winner == backend:
        return False
    mine, best = decided.costs.get(backend), decided.costs.get(winner)
    if mine is None or best is None:
        return False
    return beats(best, mine, objective == "tokens_per_second", tolerance)
