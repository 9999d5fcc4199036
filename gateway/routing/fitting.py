"""Least-squares fits of a latency (TTFT or TPOT) against the load a request met, pure arithmetic.

    y = a + b * c + g * z

c: the backend's own concurrency at dispatch; z: the share of the request's life during which another
backend of its device had requests in flight (docs/measurement.md, section 5). b and g are clamped at >= 0
(more load never makes a request faster: a negative coefficient is noise), a regressor that does not vary
is left out, evaluation never goes below the lowest measured concurrency (no extrapolation towards idle)
nor below the fastest value measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

LoadPoint = tuple[float, float, float]  # (concurrency, device share, value)

# Centring raw sums of squares leaves rounding noise where a regressor never varied: a centred sum below
# this share of its raw sum is no variance at all.
CANCELLATION = 1e-9
# Two regressors whose determinant is below this share of the product of their variances move together:
# fitting both would split one effect between them at random, so c is fitted alone.
COLLINEAR = 1e-12


@dataclass(frozen=True, slots=True)
class Fit:
    intercept: float
    slope: float
    low_c: float  # lowest measured concurrency
    floor: float  # fastest measured value
    contention: float = 0.0  # added while another backend on the device is busy
    high_c: float = math.inf  # highest measured concurrency (what the fit has seen, not a limit on it)

    def at(self, concurrency: float, device_busy: bool = False) -> float:
        value = self.intercept + self.slope * max(concurrency, self.low_c)
        return max(value + (self.contention if device_busy else 0.0), self.floor)


def fit_linear(points: Sequence[tuple[float, float]]) -> Fit | None:
    """Least-squares y = a + b*c with b >= 0; the mean when all points share one concurrency."""
    if not points:
        return None
    n = len(points)
    mean_c = sum(c for c, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var_c = sum((c - mean_c) ** 2 for c, _ in points)
    slope = 0.0
    if var_c > 0:
        slope = max(0.0, sum((c - mean_c) * (y - mean_y) for c, y in points) / var_c)
    low_c = min(c for c, _ in points)
    high_c = max(c for c, _ in points)
    return Fit(mean_y - slope * mean_c, slope, low_c, min(y for _, y in points), high_c=high_c)


def fit_load(points: Sequence[LoadPoint]) -> Fit | None:
    """Least-squares y = a + b*c + g*z over (c, z, y) points with b, g >= 0 (z: 1 = device neighbour busy).

    Normal equations on centred sums; a regressor that does not vary is left out, and one whose
    coefficient comes out negative is dropped and the other refitted alone.
    """
    if not points:
        return None
    n = len(points)
    # One pass of raw sums (the router refits a cell whenever it records a sample), centred afterwards.
    sc = sz = sy = rcc = rzz = rcz = rcy = rzy = 0.0
    low_c = floor = math.inf
    high_c = -math.inf
    for c, z, y in points:
        sc += c
        sz += z
        sy += y
        rcc += c * c
        rzz += z * z
        rcz += c * z
        rcy += c * y
        rzy += z * y
        if c < low_c:
            low_c = c
        if c > high_c:
            high_c = c
        if y < floor:
            floor = y
    mc, mz, my = sc / n, sz / n, sy / n
    scc = _centred(rcc, n * mc * mc)
    szz = _centred(rzz, n * mz * mz)
    scz, scy, szy = rcz - n * mc * mz, rcy - n * mc * my, rzy - n * mz * my
    b = g = 0.0
    det = scc * szz - scz * scz
    if scc > 0 and szz > 0 and det > COLLINEAR * scc * szz:
        b, g = (szz * scy - scz * szy) / det, (scc * szy - scz * scy) / det
        if b < 0:
            b, g = 0.0, max(0.0, szy / szz)
        elif g < 0:
            b, g = max(0.0, scy / scc), 0.0
    elif scc > 0:  # z constant, or z and c move together: c alone
        b = max(0.0, scy / scc)
    elif szz > 0:
        g = max(0.0, szy / szz)
    return Fit(my - b * mc - g * mz, b, low_c, floor, g, high_c)


def _centred(raw: float, mean_part: float) -> float:
    value = raw - mean_part
    return value if value > CANCELLATION * raw else 0.0  # raw >= 0: a sum of squares
