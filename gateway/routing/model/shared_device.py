"""How the adaptive scorer sees a shared device (docs/measurement.md, sections 5 and 6): which of its
backends a request is, which of their loads it is charged for slowing, what exploring one of them costs
the others, and which of them holds it (from each one's steady state with the device's load on it alone).
Devices come from `backends[].device`; a backend without one is a device of its own. Pure
functions on plain data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from gateway.records import BackendSnapshot
from gateway.routing.adaptive.verdict import effective_value
from gateway.routing.model.cells import CellModel
from gateway.routing.model.harm import DeviceLoad
from gateway.routing.model.predict import PredictConfig, Prediction, blended, predict_with_model
from gateway.routing.pipeline.context import RouteContext


def device_members(backends: Sequence[BackendSnapshot], devices: Mapping[str, str]) -> dict[str, list[str]]:
    """Per backend, the backends sharing its device, itself included (a backend without a device: itself).
    Only the backends the router hands the scorer are seen: one filtered out for this request is not."""
    by_device: dict[str, list[str]] = {}
    for b in backends:
        if b.name in devices:
            by_device.setdefault(devices[b.name], []).append(b.name)
    return {b.name: by_device[devices[b.name]] if b.name in devices else [b.name] for b in backends}


def charged(
    backend: str, members: Sequence[DeviceLoad], steady: Mapping[str, Prediction], tolerance: float
) -> list[DeviceLoad]:
    """The device loads whose slow-down a request on `backend` is charged for: all of its device, except a
    busy neighbour that `backend` beats by more than `tolerance` with the device's whole load on each
    alone. Moving a stream off a slower engine slows its last requests while both run; charging that
    transient against every single request would keep the stream on the slower engine for good, so the
    harm decides how traffic mixes, and the steady state which engine it piles onto."""
    mine = steady.get(backend)
    if mine is None or mine.value is None:
        return list(members)

    def beaten(other: Prediction | None) -> bool:
        if mine.value is None or other is None or other.value is None:
            return False
        return beats(mine.value, other.value, mine.higher_is_better, tolerance)

    return [
        d for d in members if d.backend == backend or d.inflight <= 0 or not beaten(steady.get(d.backend))
    ]


def spreads(backend: str, winner: str | None, device: Mapping[str, Sequence[DeviceLoad]]) -> bool:
    """Whether exploring `backend` now costs nothing beyond its own answer: it is idle on a device of its
    own (no other engine to slow, no queue to join) while the predicted winner has requests in flight, so
    the exploration spreads load as a load balancer would."""
    members = device[backend]
    if winner is None or winner not in device or len(members) > 1 or members[0].inflight > 0:
        return False
    return any(d.inflight > 0 for d in device[winner] if d.backend == winner)


def holding(
    backend: str, winner: str | None, device: Mapping[str, Sequence[DeviceLoad]], exploring: int = 0
) -> bool:
    """Whether `backend` has requests in flight, beyond the `exploring` ones measuring it for this
    request's profile, on a device the predicted winner shares and leaves idle: a request sent to the
    winner would wake the device's second engine, slowing every request of `backend` for its whole life,
    where measuring `backend` with it slows nobody. On spark-duo-flaky the mixed burst's fifth request of
    a profile whose refresh of fp8-base was under way (fp8-base holding the Spark with seven) went to the
    idle fp8-mtp: the burst's TTFT p95 14.4 s, the oracle's 9.4. Its own explorations do not make a
    holder: in a closed loop on the winner, the last user whose request ended there found it idle beside
    the explorations and followed them, and the next, until the whole loop sat on the slower engine."""
    if winner is None or winner == backend or winner not in device:
        return False
    members = {d.backend: d.inflight for d in device[backend]}
    return members.get(backend, 0) > exploring and members.get(winner) == 0


def queue_share(backend: str, winner: str | None, device: Mapping[str, Sequence[DeviceLoad]]) -> float:
    """The share of its usual pace at which exploring `backend` accrues for the queue it joins: when both
    it and the predicted winner are alone on devices of their own and `backend` runs more requests, the
    explored request waits behind more of them than the winner would make it (a cost a blind
    least-in-flight balancer never pays), so the pace falls as that queue grows against the winner's,
    (n_winner + 1) / (n_backend + 1); else 1. The mirror of `spreads`; it slows, never stops: a backend
    kept busier by another profile's traffic is still measured for this one."""
    if winner is None or winner not in device or len(device[backend]) > 1 or len(device[winner]) > 1:
        return 1.0
    mine, theirs = device[backend][0].inflight, device[winner][0].inflight
    return (theirs + 1) / (mine + 1) if mine > theirs else 1.0


def contended(backend: str, device: Sequence[DeviceLoad]) -> float:
    """How many requests of its device's other engines exploring `backend` now would slow: each engine
    counts the larger of its in-flight requests and the mean load its newest requests met (between two
    requests of a steady stream it is not idle), times the share of the exploration that keeps
    `backend` busy beyond the n requests it runs already (~1 / (n + 1): the longest of n remaining
    times is ~n / (n + 1) of a request). 0 on a quiet device: the cheap moment."""
    own = next(d.inflight for d in device if d.backend == backend)
    neighbours = sum(max(d.inflight, d.model.recent_concurrency) for d in device if d.backend != backend)
    return neighbours / (own + 1)


def holders(
    device: Mapping[str, Sequence[DeviceLoad]],
    steady: Mapping[str, float],
    *,
    higher_is_better: bool,
    margin: float,
) -> dict[str, str]:
    """Per candidate that should leave its device to the engine holding it, that engine.

    Engines sharing a device share its memory bandwidth: two running at once each step slower, so a
    device's load served by one engine beats the same load split over two unless the other engine is
    faster by more than the contention costs (on a Spark a busy neighbour nearly doubles a step). The
    engine with the most requests in flight holds the device; another takes this request only when its
    steady state (`steady`: the request's objective per successful request with the device's whole load
    on it alone) beats the holder's by more than `margin`, which moves the device's traffic over to it.
    No hold when the holder is full (its requests at its capacity: beyond that it queues) or its steady
    state is unknown: the per-request costs decide."""
    held: dict[str, str] = {}
    for name, members in device.items():
        holder = _holder(members)
        if holder.backend == name or holder.inflight <= 0:
            continue
        theirs = steady.get(holder.backend)
        if theirs is None or (holder.capacity is not None and holder.inflight >= holder.capacity):
            continue
        mine = steady.get(name)
        if mine is not None and beats(mine, theirs, higher_is_better, margin):
            continue
        held[name] = holder.backend
    return held


def steady_states(
    ctx: RouteContext,
    models: Mapping[str, CellModel],
    device: Mapping[str, Sequence[DeviceLoad]],
    config: PredictConfig,
    errors: Mapping[str, float] | None = None,
) -> dict[str, Prediction]:
    """Per backend sharing a device, the request's objective were the device's whole load on it alone
    (its neighbours drained): what it is worth once traffic has moved, not while it moves. A backend
    failing a share of its requests does not have the device alone: its failures fail over to a
    neighbour, which it then shares the device with (`failover_share`)."""
    rates = errors or {}
    states: dict[str, Prediction] = {}
    for name, members in device.items():
        if len(members) > 1:
            load = sum(d.inflight for d in members)
            shared = failover_share(rates.get(name, 0.0), load)
            states[name] = _alone(ctx, name, models[name], load, config, shared)
    return states


def failover_share(error_rate: float, load: int) -> float:
    """The share of the time a backend holding its device's `load` shares it with the neighbour its
    failed requests fail over to: with each of its load + 1 requests failing over at `error_rate`, the
    neighbour has at least one in flight about 1 - exp(-error_rate * (load + 1)) of the time. On
    spark-duo-flaky fp8-mtp, the faster engine alone, fails 8 % of its requests: holding sixteen, its
    failovers kept fp8-base busy most of the time and its batch stepped at the shared device's pace."""
    return 1.0 - math.exp(-max(error_rate, 0.0) * (load + 1))


def claims(
    ctx: RouteContext,
    models: Mapping[str, CellModel],
    device: Mapping[str, Sequence[DeviceLoad]],
    steady: Mapping[str, Prediction],
    errors: Mapping[str, float],
    config: PredictConfig,
) -> dict[str, float]:
    """Each steady state per successful request, for `holders`. One claimed beyond the loads its fits
    measured (a flat fit from a few requests would claim at sixteen what it did at one) is taken at the
    highest load it measured and carried to the device's load along the holder's growth between those two
    loads: engines of one device scale with their batch alike, and the holder has measured that load. The
    holder's cell gives the growth when it measured loads as low as the claimant's, else the holder's
    all-profile model; when neither did, nothing is claimed (no evidence that it beats the holder there)."""

    def value_at(backend: str, inflight: int, model: CellModel | None = None) -> float | None:
        used = models[backend] if model is None else model
        rate = errors.get(backend, 0.0)
        alone = _alone(ctx, backend, used, inflight, config, failover_share(rate, inflight))
        return effective_value(alone, rate)

    claimed: dict[str, float] = {}
    for name, prediction in steady.items():
        members = device[name]
        holding = _holder(members)
        holder = holding.backend
        load = sum(d.inflight for d in members)  # as steady_states put it on each: c = load + 1
        reach = measured_reach(models[name])
        if holder != name and 1 <= reach <= load:
            guide = _growth_guide(models[holder], holding.model, reach)
            if guide is None:
                continue
            mine = value_at(name, int(reach) - 1)
            low, high = value_at(holder, int(reach) - 1, guide), value_at(holder, load, guide)
            if mine is not None and low and high is not None:
                claimed[name] = mine * high / low
                continue
        if (value := effective_value(prediction, errors.get(name, 0.0))) is not None:
            claimed[name] = value
    return claimed


def _growth_guide(cell: CellModel, engine: CellModel, reach: float) -> CellModel | None:
    """The holder's model whose fits measured loads down to `reach`: its cell's, else its all-profile one;
    None when neither did (below its lowest measured load a fit is flat, which is no growth at all)."""
    for model in (cell, engine):
        floors = [fit.low_c for fit in (model.ttft, model.tpot) if fit is not None]
        if floors and max(floors) <= reach:
            return model
    return None


def measured_reach(model: CellModel) -> float:
    """The highest load every fit of `model` has measured (0: none fitted)."""
    reaches = [fit.high_c for fit in (model.ttft, model.tpot) if fit is not None]
    return min(reaches, default=0.0)


def _alone(
    ctx: RouteContext,
    backend: str,
    model: CellModel,
    inflight: int,
    config: PredictConfig,
    shared: float = 0.0,
) -> Prediction:
    """The request's objective on `backend` with `inflight` requests ahead of it and nothing else on its
    device but, a `shared` share of the time, a busy neighbour (its own failovers)."""

    def at(busy: bool) -> Prediction:
        return predict_with_model(
            backend,
            model,
            inflight=inflight,
            objective=ctx.profile.objective,
            max_output_tokens=ctx.features.max_output_tokens,
            config=config,
            device_busy=busy,
            repetition=ctx.features.repetition,
            prompt_tokens=ctx.features.prompt_tokens,
        )

    alone = at(False)
    return alone if shared <= 0 else blended(alone, at(True), shared)


def _holder(members: Sequence[DeviceLoad]) -> DeviceLoad:
    """The engine holding a device: the one with the most requests in flight."""
    return max(members, key=lambda d: d.inflight)


def beats(value: float, other: float, higher_is_better: bool, margin: float) -> bool:
    """Whether `value` is better than `other` by more than `margin` (relative)."""
    return value > other * (1 + margin) if higher_is_better else value * (1 + margin) < other
