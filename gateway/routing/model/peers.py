"""A backend not yet measured, alone on its device, is assumed as fast as its best-measured peer.

Pure on plain data. Without this, a backend short of `min_samples` has no prediction and ranks below
every backend that has one, so until exploration has measured it, it takes only explorations: with
engines on separate devices, the measured one piles up requests while the other sits idle, and blind
least-in-flight, which splits load by accident, wins the first minutes of every new profile. The engines of
a pool serve the same model; until a backend says otherwise, the expectation that does least harm is that
it runs this profile like its peer at the load it would meet itself. Its own requests then measure it (a
backend predicted fastest is not explored, its traffic is the measurement); the assumption stands until
`min_samples` of its answers have come back. It is asked at the backend's own load, so a burst splits
evenly between the two, as least-in-flight would split it: a wrong assumption costs at most the share a
blind balancer would have sent. Ending it once `min_samples` requests were merely in flight left the
measured peer every later request of the burst until those answers came back: on a pair of Sparks, 12 of
16 closed-loop users on the slower engine for the length of a 512-token answer.

Only a backend with its device to itself borrows: beside a busy neighbour, a request costs that neighbour
contention the peer's fit never saw, and the shared-device rules (routing/model/shared_device.py) need the
backend's own steady state. Such a backend, measured on other profiles, takes the peer's model of this one
scaled by how much slower it decodes than the peer (`decode_ratio`; model_choice.ModelChoice.relative).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gateway.routing.model.cells import CellModel
from gateway.routing.model.fitting import Fit
from gateway.routing.model.harm import DeviceLoad

# How much of the prefer order a levelled prior keeps: enough to break a tie of load, far less than one
# request in flight more weighs in the load score (routing/pipeline/scorers.py, 1 / (1 + in-flight)).
TIE_BREAK = 1e-3
# The preferred backend's requests in flight from which an unmeasured profile's prior is levelled: a batch.
LEVEL_FROM_INFLIGHT = 2


@dataclass(frozen=True, slots=True)
class Borrowed:
    peer: str
    model: CellModel  # the peer's model of this profile
    # The peer's all-profile model: how a request slows the batch it joins (routing/model/harm.py).
    engine: CellModel

    def alone(self, me: DeviceLoad) -> list[DeviceLoad]:
        """The backend's device (itself alone) as if it ran like the peer."""
        return [replace(me, model=self.engine)]

    def why(self, own_samples: int, min_samples: int) -> str:
        return f"not measured yet ({own_samples} samples < {min_samples}): assumed as fast as {self.peer}"


def measured_peers(
    models: Mapping[str, CellModel], repetition: float, min_samples: int
) -> list[tuple[int, str]]:
    """(samples, name) of the models holding min_samples of this content: max() is the best-measured."""
    return [
        (model.samples, name)
        for name, model in models.items()
        if model.samples >= min_samples and model.measured_content(repetition, min_samples)
    ]


def borrowed_from_peers(
    models: Mapping[str, CellModel],
    device: Mapping[str, Sequence[DeviceLoad]],
    repetition: float,
    min_samples: int,
) -> dict[str, Borrowed]:
    """Per backend alone on its device and short of min_samples answers, the model of the peer measured on
    the most samples of this request's content (none measured: no entry)."""
    measured = measured_peers(models, repetition, min_samples)
    if not measured:
        return {}
    _, peer = max(measured)
    engine = next(d.model for d in device[peer] if d.backend == peer)
    return {
        name: Borrowed(peer, models[peer], engine)
        for name, model in models.items()
        if len(device.get(name, ())) == 1 and model.samples < min_samples
    }


def levelled_prior(
    prior: Mapping[str, float],
    models: Mapping[str, CellModel],
    device: Mapping[str, Sequence[DeviceLoad]],
    repetition: float,
    min_samples: int,
) -> dict[str, float]:
    """The prior, with every backend alone on its device levelled to (nearly) 1 while no backend is
    measured on this request's content and the preferred one already runs a batch: with no peer to
    borrow from, the backends are still assumed as fast as each other, so load ranks them as
    least-in-flight would and the prefer order only breaks ties. A burst arriving before any cell holds
    min_samples answers would otherwise all go where the prefer order points, the other engines idle,
    and on engines of their own devices that costs what a blind balancer does not. Below a batch
    (LEVEL_FROM_INFLIGHT) the prefer order stands: a second request costs an engine little (decode reads
    the weights once per step, whatever the batch), while the policy's reasons for its order (content,
    speculation) are what nothing measured yet can weigh: spark-pair-spec-content's second user sent to
    the n-gram engine waited twice as long for prose."""
    preferred = max(prior, key=prior.__getitem__, default=None)
    if measured_peers(models, repetition, min_samples) or _inflight(preferred, device) < LEVEL_FROM_INFLIGHT:
        return dict(prior)
    return {
        name: 1.0 - TIE_BREAK * (1.0 - value) if len(device.get(name, ())) == 1 else value
        for name, value in prior.items()
    }


def _inflight(backend: str | None, device: Mapping[str, Sequence[DeviceLoad]]) -> int:
    """Requests in flight on `backend`, as its device's loads count them (0 when not a candidate)."""
    loads = device.get(backend, ()) if backend is not None else ()
    return next((load.inflight for load in loads if load.backend == backend), 0)


def carried(fit: Fit | None, guide: Fit | None, concurrency: float) -> Fit | None:
    """`fit` asked at a load beyond any it measured, carried there along `guide`'s relative growth per
    sequence (at least its own): a fit measured at one load is flat, and would predict a batch of nine
    as fast as one. Unchanged within its range, or when the guide saw no more load than it did."""
    if fit is None or guide is None or concurrency <= fit.high_c or guide.high_c <= fit.high_c:
        return fit
    edge = fit.at(fit.high_c)
    slope = max(fit.slope, edge * guide.slope / max(guide.at(fit.high_c), 1e-9))
    return replace(fit, intercept=edge - slope * fit.high_c, slope=slope)


def carried_model(model: CellModel, guide: CellModel, concurrency: float) -> CellModel:
    """`model`'s TTFT and TPOT fits carried beyond their measured loads along `guide`'s (`carried`)."""
    novel, repeated = model.tpot_by_content
    return replace(
        model,
        ttft=carried(model.ttft, guide.ttft, concurrency),
        tpot=carried(model.tpot, guide.tpot, concurrency),
        tpot_by_content=(
            carried(novel, guide.tpot, concurrency),
            carried(repeated, guide.tpot, concurrency),
        ),
    )


def widest(models: Mapping[str, CellModel], min_samples: int) -> CellModel | None:
    """The measured model whose TPOT fit saw the highest load: every backend's guide (`carried` leaves the
    guide's own fits, and any that saw as much, unchanged)."""
    seen = [
        (m.tpot.high_c, m.samples, name)
        for name, m in models.items()
        if m.samples >= min_samples and m.tpot is not None
    ]
    return models[max(seen)[2]] if seen else None


def decode_ratio(
    pairs: Sequence[tuple[CellModel, CellModel]], min_samples: int, concurrency: float
) -> float | None:
    """How many times longer a backend's decode steps are than a peer's: over the profiles both measured
    (`pairs`: its cell and the peer's, min_samples each), the median ratio of their TPOT fits at the load
    both measured nearest `concurrency` (None: no such profile). Engines serving one model scale with
    prompt and batch alike, so what a profile costs on the peer, times this, is what it costs here; the
    ratio itself moves with load (a speculative engine's lead shrinks as its batch grows), so it is read
    as near the load asked as was measured."""
    ratios = []
    for mine, theirs in pairs:
        if min(mine.samples, theirs.samples) < min_samples or mine.tpot is None or theirs.tpot is None:
            continue
        low = max(mine.tpot.low_c, theirs.tpot.low_c)
        high = min(mine.tpot.high_c, theirs.tpot.high_c)
        if high < low:
            continue  # no load both measured: a fit outside its loads is flat
        load = min(max(concurrency, low), high)
        if (own := mine.tpot.at(load)) > 0 and (peer := theirs.tpot.at(load)) > 0:
            ratios.append(own / peer)
    return statistics.median(ratios) if ratios else None


def decodes_slower(mine: CellModel, theirs: CellModel, min_samples: int, tolerance: float) -> bool | None:
    """Whether an engine decodes slower than a peer beyond `tolerance`, by their all-profile models
    (`decode_ratio` at the loads both measured nearest one request, where decode probes run); None while
    either holds fewer than min_samples or no load both measured."""
    ratio = decode_ratio([(mine, theirs)], min_samples, 1.0)
    return None if ratio is None else ratio > 1.0 + tolerance
