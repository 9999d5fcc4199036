"""Regime change: fit only the points of the engine's current behaviour, so a backend that slows down (a
throttled GPU, a restart with another config, a new tenant) is noticed after a handful of requests however
long its window (docs/measurement.md, section 5)."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.routing.model.fitting import Fit, LoadPoint, LoadSums, fit_load

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
    if len(older) < run:
        return fit_load(points), 0
    met = LoadSums()
    for point in older:
        met.add(*point)
    before = met.coefficients()

    # Walk back from the newest point while the points differ the same way. One at a load never met says
    # nothing either way: it neither ends the run (the one request explored at a lone load after a slow-down
    # would hand the fit back to the old regime) nor counts toward it.
    first, length, differing = 0, 0, 0
    for point in reversed(points):
        way = _side(point, met, before, factor)
        if way is not None:
            if way == 0 or first not in (0, way):
                break
            first, differing = way, differing + 1
        length += 1
    if first == 0 or differing < run:
        return fit_load(points), 0
    return fit_load(points[-length:]), length * first


def regimes(
    points: Sequence[LoadPoint],
    run: int = CHANGE_RUN,
    factor: float = CHANGE_FACTOR,
) -> list[tuple[int, int]]:
    """Where each regime of the engine's behaviour begins in `points` (oldest first), and which way it moved:
    (index, 1 slower / -1 faster); the first is (0, 0). The decode pace's regimes (slowdown.decode_pace).

    Scanning forward, when `run` points in a row sit more than `factor` above the fit of the current
    regime's points before them (or all below it by as much), at loads that regime covered, a new regime
    begins at the first of them: `current_regime`'s test, with one difference. A regime holds until a run
    goes the other way: an answer that fits the old behaviour (a lone request beside a busy neighbour,
    whose contention the old fit explains) is noise in the new regime, where the trailing run it breaks
    would hand the fit back to the old regime, and the traffic that had left a throttled engine would come
    back to it in a wave. Only for decode pace: a frame gap is the engine's step, whatever the prompt,
    where TTFT turns on the prompt's length and cache hits, which a run of long prompts would make a
    regime that holds. A point at a load the regime never met says nothing either way; its load is the one
    it decoded at (slowdown.itl_points), not the one it was sent at. The first requests of a burst are
    sent at a load of one or two and decode at sixteen: on a pair whose neighbour had just been
    throttled, fp8-vision's first 15-request burst read 2.5x its fit of one and two, its fits took a
    "slow-down" of 2.5x, and traffic went back to the throttled engine.
    """
    found = [(0, 0)]
    sums = LoadSums()
    for i, point in enumerate(points):
        if sums.n >= run and (way := _change_at(points, i, sums, run, factor)):
            found.append((i, way))
            sums = LoadSums()
        sums.add(*point)
    return found


def _change_at(
    points: Sequence[LoadPoint],
    i: int,
    before: LoadSums,
    run: int,
    factor: float,
) -> int:
    """1 (slower) or -1 (faster) when points[i:] open with `run` points differing that way from `before`'s
    fit, else 0. One at a load `before` never met says nothing either way: it neither ends the run (the one
    request explored at a lone load after a slow-down) nor counts toward it."""
    fit = before.coefficients()

    def side(j: int) -> int | None:
        if not before.covers(points[j][0], points[j][1], SHARE_MARGIN):
            return None  # decoded at a load never met
        return _side(points[j], before, fit, factor)

    first = side(i)
    if not first:  # most points: on the fit, or at a load never met
        return 0
    differing = 0
    for j in range(i, len(points)):
        way = side(j)
        if way is None:
            continue
        if way != first:
            return 0
        differing += 1
        if differing >= run:
            return first
    return 0


def _side(point: LoadPoint, met: LoadSums, fit: tuple[float, float, float], factor: float) -> int | None:
    """1 slower than `met`'s fit (its coefficients) by over `factor`, -1 faster, 0 on it; None at a load
    its points never met."""
    c, z, y = point
    if not met.covers(c, z, SHARE_MARGIN):
        return None
    expected = met.expected(c, z, fit)
    return 1 if y > factor * expected else -1 if y * factor < expected else 0


def regime_shift(points: Sequence[LoadPoint], found: Sequence[tuple[int, int]]) -> float:
    """How much slower the engine's current regime is than the one before it (1.0: no slow-down seen), from
    the `regimes` found in `points`: the median of each of its points over the previous regime's fit at its
    load. What a fit restarted from the current regime's points already holds, and a fit built before the
    change (another profile's cell) does not."""
    start, way = found[-1]
    if way <= 0:
        return 1.0
    before = fit_load(points[found[-2][0] : start])
    if before is None:
        return 1.0
    ratios = sorted(y / expected for c, z, y in points[start:] if (expected := expect(before, c, z)) > 0)
    return max(1.0, ratios[len(ratios) // 2]) if ratios else 1.0


def expect(fit: Fit, concurrency: float, share: float) -> float:
    """The fit's value at a load, the device share taken as the fraction it is (Fit.at takes busy or not)."""
    value = fit.intercept + fit.slope * max(concurrency, fit.low_c) + fit.contention * share
    return max(value, fit.floor)
