"""Which model predicts a backend for a profile: its cell's own, or, while the cell is short of min_samples,
one borrowed where that says more than a few answers do (docs/measurement.md, section 5).

- A cell with min_samples answers predicts itself.
- Beside a neighbour on its device, a backend short of samples takes the profile's model on the peer measured
  on it most, times how much slower it decodes than that peer where both measured (`ModelChoice.relative`,
  peers.decode_ratio): its own fit knows only the loads and prompts it happened to serve. For a ttft or e2e
  profile only beside a peer seen slowed (the ratio is of decode paces, a rough guess for a prefill).
- Beside a neighbour seen slowed beyond the tolerance and no such ratio known, the neighbour's model as it
  was before its slow-down (`before_slowdown`): not measured is not slower than the engine the traffic
  leaves was while healthy. With no prediction at all, a backend ranks below every backend that has one,
  the throttled engine included, and beside it holds no claim on the device: a one-Spark pair whose
  favoured engine throttled 2.5x into a 16-user round sent that round's next five requests to it, each
  running 2x longer, while the other engine's first decode probes came back.
- Else a `tokens_per_second` profile borrows the backend's all-profile model: decode speed at a load is
  the engine's, whatever the prompt. A ttft or e2e objective depends on the profile's prompts, and waits
  for its own samples.
- A borrowed model serves only where it holds min_samples of the request's content (`own_content`).

Every model is scaled by its engine's slow-down as of the decision under way (routing/slowdown/memory.py),
so each profile's cell of a throttled engine reads slower, not only the ones it served since.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gateway.policy.schema import Adaptive
from gateway.records import BackendSnapshot
from gateway.routing.model.cells import CellModel, CellView, ModelCache, Windows
from gateway.routing.model.peers import decode_ratio, measured_peers
from gateway.routing.pipeline.context import RouteContext
from gateway.routing.slowdown.memory import EngineSlowdowns
from gateway.routing.slowdown.reading import scaled

Chosen = tuple[CellModel, str | None]  # the model, and where it came from when not from the cell


def loads_met(model: CellModel) -> float:
    """The highest load `model`'s answers met: a fit of a few answers is flat, and says nothing of a
    load beyond it (a backend measured idle would look as fast with eight requests in flight)."""
    return max((fit.high_c for fit in (model.ttft, model.tpot) if fit is not None), default=0.0)


def own_content(model: CellModel, cell: CellModel, repetition: float, min_samples: int) -> CellModel:
    """`model` (the cell's, or one borrowed from the backend's other profiles), or the cell's own where the
    borrowed one never measured this request's content: a decode speed learned on novel prose says nothing
    of repetitive content on a speculative engine, and a borrowed prediction would outrank the prior of a
    backend not yet measured (a plain engine took edits from the speculative one the policy prefers)."""
    if model is cell or model.measured_content(repetition, min_samples):
        return model
    return cell


@dataclass(slots=True)
class ModelChoice:
    """The cells and all-profile models of the backends, read from `windows` through `cache` and scaled by
    `slowdowns`; `counts` keeps each cell's sample and error counts per windows version (bounded like the
    windows: memoization only, the same answer as counting again)."""

    windows: Windows
    cache: ModelCache
    slowdowns: EngineSlowdowns
    counts: dict[tuple[str, str], tuple[int, int, int]] = field(default_factory=dict)

    def cell(self, backend: str, profile: str, at: float, memory: Adaptive | None = None) -> CellView:
        """The (backend, profile) cell: its model, slowed as its engine is now, and its counts. With the
        policy's knobs (`memory`), a cell measured mostly before the engine's newest slow-down is slowed by
        that one where it says more, however long ago it was seen (EngineSlowdowns.remembered)."""
        key = (backend, profile)
        version = self.windows.version(backend, profile, at)
        model = self.cache.get(self.windows, backend, profile, at)
        cached = self.counts.get(key)
        if cached is None or cached[0] != version:
            samples = self.windows.samples(backend, profile, at)
            cached = (version, len(samples), sum(1 for s in samples if s.error))
            if key not in self.counts and len(self.counts) >= self.windows.max_cells:
                del self.counts[next(iter(self.counts))]
            self.counts[key] = cached
        factor = self._remembered(
            self.slowdowns.of(backend, profile, at).for_cell(model), backend, profile, at, memory
        )
        return CellView(scaled(model, factor), cached[1], cached[2])

    def engine(self, backend: str, at: float, memory: Adaptive | None = None) -> CellModel:
        """The backend's all-profile model, slowed as its engine is now (and, with the policy's knobs, as
        remembered where most of its samples predate its newest slow-down, as `cell`)."""
        engine = self.cache.backend(self.windows, backend, at)
        slowed = self.slowdowns.latest(backend)
        factor = 1.0 if slowed is None else slowed.for_cell(engine)
        return scaled(engine, self._remembered(factor, backend, None, at, memory))

    def _remembered(
        self, factor: float, backend: str, profile: str | None, at: float, memory: Adaptive | None
    ) -> float:
        """`factor`, or the remembered slow-down of the cell (None: the all-profile model) where that is
        larger, with the policy's knobs (EngineSlowdowns.remembered); without them, `factor`."""
        if memory is None:
            return factor
        return max(factor, self.slowdowns.remembered(backend, profile, at, memory.tolerance))

    def choose(
        self, ctx: RouteContext, b: BackendSnapshot, cells: Mapping[str, CellView], neighbours: Sequence[str]
    ) -> Chosen:
        """The cell's model, or for a profile still under min_samples: on a `shared` device, the profile's
        model on the peer measured on it most, times how much slower this backend decodes (`relative`);
        for a ttft or e2e profile only beside a peer seen slowed, whose measured cell would otherwise
        outrank this one on being measured (spark-duo-degrading's single-user requests went to the
        throttled engine predicted at 90 s), while beside a healthy one the prior and exploration decide
        as before (the ratio is of decode paces, a rough guess for a prefill; taken there as well, it
        changed which engine refreshed in spark-duo-flaky's mixed burst and its TTFT p95 with it, 11.7 ->
        17.0 s). Else, for tokens_per_second, the backend's all-profile model (decode speed is the
        engine's, whatever the prompt). A backend alone on its device is carried beyond the loads
        that model measured along the widest-measured one (peers.carried); beside a neighbour it is not,
        and its flat fit would promise a burst the speed of one request. The ratio serves only there: on
        h100-inverted (a device each), where the speculative engine's deficit grows from 10 % at one user
        to 55 % at sixteen, a ratio read at the loads both had measured sent it more of the 16-user phase
        than the carried fit did (671 -> 663 tok/s). Returned with a note of where a borrowed model came
        from, for the prediction's why (None: the backend's own). `neighbours`: the other backends of its
        device (none: a device of its own)."""
        cell = cells[b.name]
        min_samples = ctx.adaptive.min_samples
        if cell.model.samples >= min_samples:
            return cell.model, None
        decode = ctx.profile.objective == "tokens_per_second"
        if neighbours and (relative := self.relative(ctx, b, cells, beside_slowed=not decode)) is not None:
            return relative
        if neighbours and (healthy := self.before_slowdown(ctx, cells, neighbours)) is not None:
            return healthy
        if not decode:
            return cell.model, None
        engine = self.engine(b.name, self.windows.now(), ctx.adaptive)
        return (engine, None) if engine.samples >= min_samples else (cell.model, None)

    def before_slowdown(
        self, ctx: RouteContext, cells: Mapping[str, CellView], neighbours: Sequence[str]
    ) -> Chosen | None:
        """The model of the neighbour seen slowed the most beyond the tolerance, as it predicted that
        engine before the slow-down (unscaled: its cell's own, or for tokens_per_second its all-profile
        model while the cell is short), with a note; None when no neighbour is slowed so, or none has a
        model of min_samples. A neighbour's request costs contention that model never saw: the
        shared-device rules price that from the device's loads, as for any backend."""
        at, knobs = self.windows.now(), ctx.adaptive
        found = []
        for name in neighbours:
            slowed = self.slowdowns.suspect(name, knobs)
            if name not in cells or slowed is None:
                continue
            model = self.cache.get(self.windows, name, ctx.profile.name, at)
            if model.samples < knobs.min_samples and ctx.profile.objective == "tokens_per_second":
                model = self.cache.backend(self.windows, name, at)
            if model.samples >= knobs.min_samples:
                found.append((slowed.factor, name, model))
        if not found:
            return None
        factor, peer, model = max(found, key=lambda f: (f[0], f[1]))
        note = f"not measured on this profile: {peer}'s model before it slowed {factor:.2g}x"
        return model, note

    def relative(
        self,
        ctx: RouteContext,
        b: BackendSnapshot,
        cells: Mapping[str, CellView],
        beside_slowed: bool = False,
    ) -> tuple[CellModel, str] | None:
        """This profile's model on the peer measured on it most (on this request's content), scaled by
        peers.decode_ratio over the other profiles both measured, each cell as remembered (a cell measured
        before its engine slowed reads as slow as the engine is now: else a pace of its healthy days sets
        the ratio); None without such a peer or profile, or with `beside_slowed` unless that peer's engine
        is seen slowed beyond the tolerance.
        The all-profile model holds the loads and prompts this backend happened to serve: asked about a
        16-way burst of long prompts it only measured one at a time on short ones, it answers flat, as
        fast as one short prompt decodes."""
        backend, min_samples = b.name, ctx.adaptive.min_samples
        others = {name: view.model for name, view in cells.items() if name != backend}
        measured = measured_peers(others, ctx.features.repetition, min_samples)
        if not measured:
            return None
        peer = max(measured)[1]
        knobs = ctx.adaptive
        if beside_slowed and self.slowdowns.suspect(peer, knobs) is None:
            return None
        at = self.windows.now()
        theirs = set(self.slowdowns.profiles(peer))
        common = [p for p in self.slowdowns.profiles(backend) if p in theirs and p != ctx.profile.name]
        # The cells as remembered: one measured before its engine slowed is scaled as that engine is now.
        pairs = [
            (self.cell(backend, p, at, knobs).model, self.cell(peer, p, at, knobs).model) for p in common
        ]
        load = b.inflight + 1  # the load it would meet
        ratio = decode_ratio(pairs, min_samples, load)
        if ratio is None:  # no profile both measured: their all-profile models, at a load both met
            engines = (self.engine(backend, at, knobs), self.engine(peer, at, knobs))
            ratio = decode_ratio([engines], min_samples, load)
        if ratio is None:
            return None
        note = f"not measured on this profile: {peer}'s model x {ratio:.2g}, its decode pace against {peer}'s"
        return scaled(cells[peer].model, ratio), note
