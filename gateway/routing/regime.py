"""Regime change: fit only the points of the engine's current behaviour, so a backend that slows down (a
throttled GPU, a restart with another config, a new tenant) is noticed after a handful of requests however
long its window (docs/measurement.md, section 5)."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.routing.fitting import Fit, LoadPoint, fit_load

# The newest points that must all differ from the fit of the older ones: fewer could be a burst of noise,
# and each one more is a request served at the old, wrong prediction.
CHANGE_RUN = 5
# How far (a factor, either way) a point must sit from the older fit to differ: twice or half is beyond
# the spread of one engine's steady latencies at a given load.
CHANGE_FACTOR = 2.0
# A point's device share counts as covered by the older points within this margin of the shares they met:
# shares are fractions of a request's life, so a quarter is the coarsest difference worth telling apart.
SHARE_MARGIN = 0.25


def fit_current(
    points: Sequence[LoadPoint], run: int = CHANGE_RUN, factor: float = CHANGE_FACTOR
) -> Fit | None:
    """fit_load over the points of the engine's current regime, oldest point first (see `current_regime`)."""
    return current_regime(points, run, factor)[0]


def current_regime(
    points: Sequence[LoadPoint], run: int = CHANGE_RUN, factor: float = CHANGE_FACTOR
) -> tuple[Fit | None, int]:
    """fit_load over the points of the engine's current regime, oldest point first, and how many trailing
    points that regime holds when it differs from the older ones: positive when they are slower, negative
    when faster (0: no change seen).

    A window of 256 samples remembers a backend that has since slowed down: a fit over all of it would need
    about as many new samples as old ones to notice. So when the newest `run` points all sit more than
    `factor` above the fit of the points before them (or all below it by as much), at a concurrency and
    device share those points already covered, the engine changed: the fit restarts from the trailing
    points that differ the same way. A burst at a load never measured before is not a change (the fit may
    simply not extrapolate that far), nor is noise on both sides.
    """
    older = points[:-run]
    before = fit_load(older) if len(older) >= run else None
    if before is None:
        return fit_load(points), 0
    c_low, c_high = min(c for c, _, _ in older), max(c for c, _, _ in older)
    z_low, z_high = min(z for _, z, _ in older), max(z for _, z, _ in older)

    def side(point: LoadPoint) -> int | None:
        """1 slower than the older fit, -1 faster, 0 on it; None at a load the older points never met."""
        c, z, y = point
        if not (c_low <= c <= c_high and z_low - SHARE_MARGIN <= z <= z_high + SHARE_MARGIN):
            return None
        expected = max(before.intercept + before.slope * c + before.contention * z, before.floor)
        return 1 if y > factor * expected else -1 if y * factor < expected else 0

    # Walk back from the newest point while the points differ the same way. One at a load never met says
    # nothing either way: it neither ends the run (the one request explored at a lone load after a slow-down
    # would hand the fit back to the old regime) nor counts toward it.
    first, length, differing = 0, 0, 0
    for point in reversed(points):
        way = side(point)
        if way is not None:
            if way == 0 or first not in (0, way):
                break
            first, differing = way, differing + 1
        length += 1
    if first == 0 or differing < run:
        return fit_load(points), 0
    return fit_load(points[-length:]), length * first


def regime_shift(points: Sequence[LoadPoint], run: int = CHANGE_RUN, factor: float = CHANGE_FACTOR) -> float:
    """How much slower the engine's current regime is than the one before it (1.0: no slow-down seen): the
    median of each trailing point over the older points' fit at its load. What a fit restarted from the
    trailing points already holds, and a fit built before the change (another profile's cell) does not."""
    length = current_regime(points, run, factor)[1]
    if length <= 0:
        return 1.0
    before = fit_load(points[:-length])
    if before is None:
        return 1.0
    ratios = sorted(y / expected for c, z, y in points[-length:] if (expected := expect(before, c, z)) > 0)
    return max(1.0, ratios[len(ratios) // 2]) if ratios else 1.0


def expect(fit: Fit, concurrency: float, share: float) -> float:
    """The fit's value at a load, the device share taken as the fraction it is (Fit.at takes busy or not)."""
    value = fit.intercept + fit.slope * max(concurrency, fit.low_c) + fit.contention * share
    return max(value, fit.floor)
