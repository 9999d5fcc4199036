"""How the adaptive scorer sees a shared device (docs/measurement.md, sections 5 and 6): which of its
backends a request is, which of their loads it is charged for slowing, and what exploring one of them costs
the others. Devices come from `backends[].device`; a backend without one is a device of its own. Pure
functions on plain data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.records import BackendSnapshot
from gateway.routing.harm import DeviceLoad
from gateway.routing.predict import Prediction


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
        return _beats(mine.value, other.value, mine.higher_is_better, tolerance)

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
        holder = max(members, key=lambda d: d.inflight)
        if holder.backend == name or holder.inflight <= 0:
            continue
        theirs = steady.get(holder.backend)
        if theirs is None or (holder.capacity is not None and holder.inflight >= holder.capacity):
            continue
        mine = steady.get(name)
        if mine is not None and _beats(mine, theirs, higher_is_better, margin):
            continue
        held[name] = holder.backend
    return held


def _beats(value: float, other: float, higher_is_better: bool, margin: float) -> bool:
    return value > other * (1 + margin) if higher_is_better else value * (1 + margin) < other
