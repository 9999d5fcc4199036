"""How the adaptive scorer sees a shared device (docs/measurement.md, sections 5 and 6): which of its
backends a request is, which of their loads it is charged for slowing, and what exploring one of them costs
the others. Devices come from `backends[].device`; a backend without one is a device of its own. Pure
functions on plain data.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from gateway.records import BackendSnapshot
from gateway.routing.cells import CellModel
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


def charged(backend: str, members: Sequence[DeviceLoad], beaten: Collection[str]) -> list[DeviceLoad]:
    """The device loads whose slow-down a request on `backend` is charged for: all of its device, except a
    busy neighbour that `backend` clearly beats once the device's load is on either alone (`beaten`, see
    `clearly_beats`). Moving a stream off a slower engine slows its last requests while both run; charging
    that transient against every single request would keep the stream on the slower engine for good, so
    the harm decides how traffic mixes, and the steady state which engine it piles onto."""
    return [d for d in members if d.backend == backend or d.inflight <= 0 or d.backend not in beaten]


def common_load(mine: CellModel, theirs: CellModel, device_load: float) -> float | None:
    """The load at which two backends' steady states are compared: the device's whole load, moved into the
    loads both fits measured (None when those do not overlap). Outside them a fit clamps or extrapolates,
    and a few explorations at one load predict the same at sixteen: compared there, an engine measured
    beside a busy neighbour at 1-4 claimed its 16-request stream on that flat extrapolation alone."""
    low = max(mine.measured_loads[0], theirs.measured_loads[0])
    high = min(mine.measured_loads[1], theirs.measured_loads[1])
    return None if low > high else min(max(device_load, low), high)


def clearly_beats(mine: Prediction, theirs: Prediction, tolerance: float) -> bool:
    """Whether `mine` is better than `theirs` by more than `tolerance` (relative), both predicted."""
    if mine.value is None or theirs.value is None:
        return False
    if mine.higher_is_better:
        return mine.value > theirs.value * (1 + tolerance)
    return mine.value * (1 + tolerance) < theirs.value


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
