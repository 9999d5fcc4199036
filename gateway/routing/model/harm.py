"""What a request does to the requests already in flight on its device (docs/measurement.md, section 5).

The request lasts D = TTFT + out * TPOT on its engine i. For the backends j of the device with n_j > 0 in
flight:

    own batch (j = i):    n_i * min(r_i, D / TPOT_i') * (TPOT_i(n_i + 1, z) - TPOT_i(n_i, z))
    neighbour (j != i):   n_j * min(r_j, X / TPOT_j') * (TPOT_j(n_j, 1) - TPOT_j(n_j, 0))
    X = max(0, D - R_i),  R_i = E_i * n_i / (n_i + 1)

X is how much longer engine i stays busy because of this request: its residence D beyond R_i, the longest
remaining time of the n_i requests already there (each has a remaining time spread evenly over [0, E_i],
E_i being i's mean e2e over all its samples, so the longest of n_i is expected at E_i * n_i / (n_i + 1); an
idle engine has R_i = 0, X = D). For X seconds the neighbour j shares the device instead of having it to
itself, so each of its requests decodes its tokens TPOT_j(n_j, 1) - TPOT_j(n_j, 0) slower (the fitted
contention term, learned from `device_share`). A neighbour that a third busy backend keeps sharing the
device anyway is not charged. TPOT_j' is j's TPOT with this request in place, fits are over all of j's
samples (any profile), r_j = half j's mean output and n_j stands for the neighbour's load over the whole
window. Separate devices: no neighbour.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.policy.schema import MIN_SAMPLES
from gateway.routing.model.cells import CellModel

# The share of its output an in-flight request still has to produce: the scorer sees counts, not ages, and
# a request found in flight at a random moment is half done on average.
LEFT_IN_FLIGHT = 0.5


@dataclass(frozen=True, slots=True)
class DeviceLoad:
    """One backend of the candidate's device (the candidate itself included), as the router sees it now."""

    backend: str
    inflight: int
    device_busy: bool  # some *other* backend of the device has requests in flight
    model: CellModel  # fitted over all of this backend's samples, any profile
    capacity: int | None = None  # requests it runs at once (engine report or configured); None: unknown


def busy_extension(candidate: DeviceLoad, duration: float) -> float:
    """Seconds a request lasting `duration` keeps `candidate` busy beyond its in-flight requests.

        X = max(0, D - R),  R = E * n / (n + 1)      (E: mean e2e of the backend; n: its in-flight count)

    R is the expected longest remaining time of n requests whose remaining times are spread evenly over
    [0, E]; an idle backend has R = 0, so the whole request extends (starts) its busy period.
    """
    n = candidate.inflight
    if n <= 0:
        return max(duration, 0.0)
    longest = candidate.model.mean_e2e * n / (n + 1)
    return max(duration - longest, 0.0)


def device_harm(
    candidate: str, duration: float, device: Sequence[DeviceLoad], min_samples: int = MIN_SAMPLES
) -> dict[str, float]:
    """Seconds a request on `candidate` lasting `duration` adds to each backend's in-flight requests
    (formulas in the module docstring). Backends without in-flight requests or without a TPOT fit over
    min_samples samples add nothing."""
    me = next((d for d in device if d.backend == candidate), None)
    extension = duration if me is None else busy_extension(me, duration)
    busy = {d.backend for d in device if d.inflight > 0}
    harm: dict[str, float] = {}
    for j in device:
        fit = j.model.tpot
        if j.inflight <= 0 or fit is None or j.model.samples < min_samples:
            continue
        if j.backend == candidate:  # its own batch grows by one, for the whole request
            before, after = fit.at(j.inflight, j.device_busy), fit.at(j.inflight + 1, j.device_busy)
            window = duration
        elif busy - {j.backend, candidate}:  # a third busy backend keeps it sharing the device anyway
            continue
        else:  # shares the device for the extra time the candidate stays busy, instead of having it alone
            before, after = fit.at(j.inflight, False), fit.at(j.inflight, True)
            window = extension
        if after <= before or window <= 0:
            continue
        remaining = j.model.mean_output_tokens * LEFT_IN_FLIGHT
        harm[j.backend] = j.inflight * min(remaining, window / after) * (after - before)
    return harm
