"""What one adaptive decision explores, planned from the verdict and what the router has booked so far:
a due refresh first, else the paced exploration of the least measured backend, and whether a decode
probe measures it instead. Nothing here changes state: the result is a plan that `AdaptiveScorer.book`
applies once the request is sent (pacing.ExplorationLedger.book).

Exploration (bounded, paced): while some eligible backend other than the predicted winner (its own traffic
measures that one) has fewer than min_samples samples for the profile, a share epsilon of the profile's
requests goes, evenly spaced, to the least measured of them (pacing.plan_exploration: a credit of epsilon
per request, spent at 1; no random draw, so a cell is measured within min_samples / epsilon requests and
decisions replay exactly). A cell counts as max(its samples, the explorations sent to it within the window):
requests still in flight count, so a burst of arrivals cannot explore more than min_samples times before the
first answer is recorded. The total cost is at most min_samples requests per backend x profile per window.
On a shared device an exploration slows the other engines' requests: as many as they run, counted as the
larger of their in-flight requests now and the mean load their newest requests met (an engine between two
requests of a steady stream is not idle), times the share of the exploration that keeps its engine busy
beyond the n requests it already runs (1 / (n + 1)). Credit then accrues at only `contended_share` / that
count of the usual rate, so the slow-down exploring causes per request does not grow with the neighbour's
load: it waits, most of the time, for a cheap moment (a quiet device, or an engine busy anyway), and still
happens if none comes. Where it would go to an engine beside a busy one, for novel content and a cell under
min_samples, decode probes go instead (probes.probe_instead; proxy/decode_probe.py): the plan says so, the
request goes to the winner. For a `tokens_per_second` profile they measure what the cell borrows (the
engine's fit); for ttft or e2e, a cell with no answer yet, they tell whether its engine decodes slower than
the winner, which puts its requests off, and they count as its measurement only once they show it
(probes.probe_measures). An idle
backend on a device of its own, while the winner is busy, slows nobody and joins no queue when explored
(shared_device.spreads): its credit accrues at MAX_EPSILON, so the same min_samples requests are spent
sooner and the prior rules for fewer requests. The mirror: one alone on its device that runs more requests
than the winner (alone on its own) accrues at (n_winner + 1) / (n_backend + 1) of the pace
(shared_device.queue_share), since the explored request would wait behind more requests than on the
winner, which a blind balancer never makes it do; slower, never stopped, so a backend kept busy by another
profile's traffic is still measured for this one. One whose answers so far (fewer than min_samples, so
not enough to rank it) predict this request better than the winner is predicted, and that slows no busy
neighbour nor joins a longer queue, is explored by every request (`promising`, from
adaptive.AdaptiveScorer._promising): measuring it is expected to cost nothing, and while the prior rules,
a single user's requests would otherwise go where the prefer order points, one in 1 / epsilon measuring
the faster engine. One short of min_samples that holds its device (requests in flight) while the winner
shares the device idle is explored by the request, credit or not (shared_device.holding): sent to the
winner, it would wake the device's second engine and slow every request of the first for its whole life;
measuring the holder slows nobody. Not a holder seen slowed (EngineSlowdowns.suspect), nor one the winner's
prediction beats by more than the tolerance (adaptive._clearly_beaten): then the request there costs more
than waking the neighbour does.

Never blind: the deferral lasts only up to a bound. Every candidate but the winner whose estimate for the
profile is too old is due (`stale_cells`): a measured cell after `refresh_requests` requests of the profile
(or `refresh_s` seconds) since its newest send, a cell short of min_samples after min_samples / epsilon
since its min_samples-th newest (pacing.blind_bound), and any cell measured before another backend of the
profile slowed down (its newest samples left its fit, slower: cells.CellModel.regime_run). An age bound
that would put a client's request beside a busy engine of its device waits for a quiet moment up to
QUIET_WAIT times the bound: an estimate merely old is not urgent, and the neighbour's requests all run
slower meanwhile (a change does not wait, nor a decode probe, which costs a few tokens). A due cell is
explored at MAX_EPSILON whatever the contention, back to back beside a busy engine (pacing.plan_refresh),
the stalest first. An engine still suspect beside a busy one waits its slow-down times the bounds, and no
other backend's change makes it due (`refresh_stretch`): a client's request there lasts the slowed
engine's long time, and its busy neighbour's requests all run slower meanwhile (on spark-duo-degrading
four such refreshes of the throttled fp8-mtp stretched the last phase from 117 s to 163 s); what it would
learn is whether the engine recovered, which is then noticed later, never not at all. A repetitive
request explores the "<profile> (repetitive)" unit, counted by its repetitive samples
(pacing.exploration_unit), so a speculative engine's decode speed is learned for both kinds of content.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from gateway.policy.schema import MAX_EPSILON, Adaptive
from gateway.records import ExplorationPlan
from gateway.routing.adaptive.verdict import Verdict
from gateway.routing.explore.pacing import (
    Age,
    Exploration,
    ExplorationLedger,
    blind_bound,
    plan_exploration,
    plan_refresh,
    stale_reason,
)
from gateway.routing.model.cells import CellView
from gateway.routing.model.harm import DeviceLoad
from gateway.routing.model.shared_device import contended, holding, queue_share, spreads
from gateway.routing.slowdown.memory import EngineSlowdowns

Planned = tuple[Exploration | None, ExplorationPlan]  # what it explores, if any; what booking it applies

# How many times its bounds a refresh waits for a quiet moment when it would put a client's request beside
# a busy engine of its device: an estimate that is merely old is not urgent, and every request of the
# neighbour runs slower while the refreshed one does.
QUIET_WAIT = 2.0


@dataclass(frozen=True, slots=True)
class Explorer:
    """What the plans are read from: the sends booked so far (`ledger`), each engine's slow-down as of
    the decision under way (`slowdowns`), and how far back the windows look (`max_age_s`)."""

    ledger: ExplorationLedger
    slowdowns: EngineSlowdowns
    max_age_s: float

    def plan(
        self,
        profile: str,
        knobs: Adaptive,
        cells: Mapping[str, CellView],
        decided: Verdict,
        device: Mapping[str, Sequence[DeviceLoad]],
        at: float,
        promising: Collection[str] = (),
        probed: Collection[str] = (),
        held: Sequence[str] = (),
    ) -> Planned:
        """The exploration due now for this profile, if any, and the plan booking this request would
        apply (pacing in pacing.plan_exploration). `promising`: backends whose few answers so far predict
        this request better than the winner does; explored at once where that slows no neighbour.
        `probed`: backends a decode probe would measure instead of this request (`probe_instead`).
        `held`: backends holding the device the winner would wake (`held`), explored by this request."""
        # The backend that wins anyway is measured by its own traffic: exploring it would waste a turn.
        winner = max(decided.scores, key=decided.scores.__getitem__, default=None)
        since = at - self.max_age_s
        counts = {
            name: max(cell.count, self.ledger.explorations(name, profile, since))
            for name, cell in cells.items()
            if name != winner
        }
        credit = self.ledger.credit(profile)
        if held:  # measuring it costs nothing, sending to the winner does (no credit needed)
            why = f"{held[0]}: holds the device {winner} would wake, not yet measured on the profile"
            return Exploration(held[0], why), ExplorationPlan(profile, backend=held[0])
        stale = self.stale_cells(profile, knobs, cells, counts, at, device, probed)
        if stale:
            return _refresh(profile, stale, credit, device)

        def share(backend: str) -> float:
            if spreads(backend, winner, device):  # the cheapest moment there is: the same min_samples
                # requests, spent sooner, so the prior rules for fewer requests
                return MAX_EPSILON / knobs.explore_epsilon
            # A longer queue (devices of their own) and busy neighbours (a shared device) never meet: at
            # most one of the two factors is below 1.
            slowed = contended(backend, device[backend])
            calm = min(1.0, knobs.contended_share / slowed) if slowed else 1.0
            return queue_share(backend, winner, device) * calm

        def free(backend: str) -> bool:  # measuring it slows no neighbour and joins no longer queue
            return not contended(backend, device[backend]) and queue_share(backend, winner, device) == 1.0

        unpaced = [name for name in promising if name in counts and free(name)]
        explored, rate = plan_exploration(
            counts,
            credit,
            min_samples=knobs.min_samples,
            epsilon=knobs.explore_epsilon,
            share=share,
            unpaced=unpaced,
        )
        if rate is None:  # nothing left to measure: the credit is dropped, if there is any (the plan still
            # books the request, which ages the other cells)
            return None, ExplorationPlan(profile, drop=bool(credit))
        if explored is None:
            return None, ExplorationPlan(profile, accrued=rate)
        if slowed := contended(explored.backend, device[explored.backend]):
            why = f"{explored.why}; slows {slowed:.3g} busy request(s) on its device"
            explored = replace(explored, why=why)
        return explored, ExplorationPlan(profile, accrued=rate, backend=explored.backend)

    def held(
        self,
        profile: str,
        knobs: Adaptive,
        cells: Mapping[str, CellView],
        winner: str | None,
        device: Mapping[str, Sequence[DeviceLoad]],
        at: float,
    ) -> list[str]:
        """The backends short of min_samples for the profile that hold the device the winner would wake
        (shared_device.holding), their explorations of it in flight aside: each request measures them.
        Not one seen slowed beyond the tolerance: waking the winner beside it is then the point, and a
        request measuring it runs at its slowed pace (a throttled fp8-mtp holding a Spark with fifteen
        took a 16-user round's next five requests this way, each twice as long as on fp8-base)."""
        since = at - self.max_age_s

        def exploring(name: str) -> int:  # sent within the window, less the samples back
            return max(0, self.ledger.explorations(name, profile, since) - cells[name].count)

        return [
            name
            for name in cells
            if name != winner
            and cells[name].count < knobs.min_samples
            and holding(name, winner, device, exploring(name))
            and self.slowdowns.suspect(name, knobs) is None
        ]

    def refresh_stretch(self, backend: str, knobs: Adaptive, device: Sequence[DeviceLoad]) -> float:
        """How many times its usual bounds a refresh of `backend` waits: its engine's slow-down, where it
        is still suspect (EngineSlowdowns.suspect: slowed beyond the tolerance now, or remembered so once
        the fits took the slow-down in) and an engine beside it is busy (`contended`), else 1. A client's
        request there lasts the slowed engine's long time, and every request of the busy neighbour runs
        slower all that while: refreshed as often as a healthy engine, the throttled fp8-mtp of
        spark-duo-degrading took four requests in its last phase and stretched it from 117 s to 163 s;
        read off the live reading alone, a lapsed one let a 16-user refresh of a throttled fp8-mtp go
        beside thirteen requests on fp8-base, predicted to cost them 622 s. Stretched, the refresh costs
        about what a healthy one does per second of the bound."""
        slowed = self.slowdowns.suspect(backend, knobs)
        if slowed is None or not contended(backend, device):
            return 1.0
        return slowed.factor

    def stale_cells(
        self,
        profile: str,
        knobs: Adaptive,
        cells: Mapping[str, CellView],
        counts: Mapping[str, int],
        at: float,
        device: Mapping[str, Sequence[DeviceLoad]],
        probed: Collection[str] = (),
    ) -> dict[str, tuple[Age, str]]:
        """The cells among `counts` (every candidate but the winner) whose estimate is past its bound,
        with their age and why. A measured cell ages from its newest send; one under min_samples from its
        min_samples-th newest, so once due it stays due until it holds a whole estimate. A cell measured
        before another backend of the profile changed regime, or before another backend's requests
        showed it slowed beyond the tolerance (`slowdowns`: as many requests ago as are slow), counts as
        stale at once. A slowed engine beside a busy one waits `refresh_stretch` times the bounds, and
        for no change of another backend (what it would learn is whether it recovered)."""
        changed = {name: cell.model.regime_run for name, cell in cells.items() if cell.model.regime_run}
        for name in cells:  # slowed beyond the tolerance by its requests in flight or newest
            slowed = self.slowdowns.latest(name)
            if slowed is not None and slowed.live > 1.0 + knobs.tolerance and slowed.slow:
                changed[name] = max(changed.get(name, 0), slowed.slow)
        stale: dict[str, tuple[Age, str]] = {}
        for name, count in counts.items():
            if cells[name].count < count >= knobs.min_samples:  # its estimate's requests are under way
                continue
            measured = count >= knobs.min_samples
            age = self.ledger.age(name, profile, at, 1 if measured else knobs.min_samples)
            stretch = self.refresh_stretch(name, knobs, device[name])
            runs = [run for other, run in changed.items() if other != name]
            bound = knobs.refresh_requests if measured else blind_bound(knobs)
            patience = 1.0 if name in probed or not contended(name, device[name]) else QUIET_WAIT
            why = stale_reason(
                age,
                max_requests=math.ceil(bound * stretch * patience),
                max_s=knobs.refresh_s * stretch * patience,
                changed=min(runs, default=None) if stretch == 1.0 else None,
            )
            if why is not None:
                stale[name] = (age, why)
        return stale


def _refresh(
    profile: str,
    stale: Mapping[str, tuple[Age, str]],
    credit: float,
    device: Mapping[str, Sequence[DeviceLoad]],
) -> Planned:
    """The refresh of the stalest due cell (pacing.plan_refresh), back to back beside a busy engine."""
    ages = {name: age for name, (age, _) in stale.items()}
    contending = [name for name in ages if contended(name, device[name])]
    refresh, accrued = plan_refresh(ages, credit, back_to_back=contending)
    if refresh is not None:
        refresh = replace(refresh, why=f"{refresh.why}: {stale[refresh.backend][1]}")
    backend = refresh.backend if refresh is not None else None
    return refresh, ExplorationPlan(profile, accrued=accrued, backend=backend)
