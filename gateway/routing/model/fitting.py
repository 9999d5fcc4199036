"""Least-squares fits of a latency (TTFT or TPOT) against the load a request met, pure arithmetic.

    y = a + b * c + g * z

c: the backend's own concurrency at dispatch; z: the share of the request's life during which another
backend of its device had requests in flight (docs/measurement.md, section 5). b and g are clamped at >= 0
(more load never makes a request faster: a negative coefficient is noise), a regressor that does not vary
is left out (the device share counts as varying only over MIN_SHARE_SPAN: the busy prediction is read at
z = 1), evaluation never goes below the lowest measured concurrency (no extrapolation towards idle) nor
below the fastest value measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

LoadPoint = tuple[float, float, float]  # (concurrency, device share, value)

# Centring raw sums of squares leaves rounding noise where a regressor never varied: a centred sum below
# this share of its raw sum is no variance at all.
CANCELLATION = 1e-9
# The span of device shares below which z counts as not varying: the busy prediction is taken at z = 1,
# and a coefficient fitted over shares of 0 to 0.004 (requests that met a neighbour's last steps) carried
# a few seconds of noise 250 times over: one TTFT fit predicted 1,888 s beside a busy neighbour, the next
# sample's 9 s. Over a tenth of a request's life the carry is at most tenfold. Measured beside a quarter:
# that also left out shares a busy phase's requests really met, and spark-duo-35b's and spark-duo-flaky's
# third rounds lost 2 % (docs/measurement.md, section 9).
MIN_SHARE_SPAN = 0.1
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
    sums = LoadSums()
    for c, z, y in points:
        sums.add(c, z, y)
    return sums.fit()


@dataclass(slots=True)
class LoadSums:
    """The raw sums fit_load solves, kept as points are added: a scan that fits every prefix of a run of
    points (regime.regimes) pays one addition per point instead of a refit. Also the span the points met."""

    n: int = 0
    sc: float = 0.0
    sz: float = 0.0
    sy: float = 0.0
    rcc: float = 0.0
    rzz: float = 0.0
    rcz: float = 0.0
    rcy: float = 0.0
    rzy: float = 0.0
    low_c: float = math.inf
    high_c: float = -math.inf
    low_z: float = math.inf
    high_z: float = -math.inf
    floor: float = math.inf

    def add(self, c: float, z: float, y: float) -> None:
        self.n += 1
        self.sc += c
        self.sz += z
        self.sy += y
        self.rcc += c * c
        self.rzz += z * z
        self.rcz += c * z
        self.rcy += c * y
        self.rzy += z * y
        if c < self.low_c:  # comparisons, not min/max: this runs per point of every refit
            self.low_c = c
        if c > self.high_c:
            self.high_c = c
        if z < self.low_z:
            self.low_z = z
        if z > self.high_z:
            self.high_z = z
        if y < self.floor:
            self.floor = y

    def covers(self, c: float, z: float, margin: float) -> bool:
        """Whether the points met this concurrency, and this device share within `margin`."""
        return self.low_c <= c <= self.high_c and self.low_z - margin <= z <= self.high_z + margin

    def fit(self) -> Fit | None:
        """The fit of the points added so far (fit_load's), None before the first."""
        if not self.n:
            return None
        a, b, g = self.coefficients()
        return Fit(a, b, self.low_c, self.floor, g, self.high_c)

    def expected(self, c: float, z: float, coefficients: tuple[float, float, float]) -> float:
        """The value at a load of the fit with these `coefficients()` (regime.expect of `fit()`, without
        building it: a scan asks at every point)."""
        a, b, g = coefficients
        return max(a + b * max(c, self.low_c) + g * z, self.floor)

    def coefficients(self) -> tuple[float, float, float]:
        """(a, b, g) of the least-squares fit of the points added so far (at least one)."""
        n = self.n
        mc, mz, my = self.sc / n, self.sz / n, self.sy / n
        scc = _centred(self.rcc, n * mc * mc)
        szz = _centred(self.rzz, n * mz * mz) if self.high_z - self.low_z >= MIN_SHARE_SPAN else 0.0
        scz, scy, szy = self.rcz - n * mc * mz, self.rcy - n * mc * my, self.rzy - n * mz * my
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
        return my - b * mc - g * mz, b, g


def _centred(raw: float, mean_part: float) -> float:
    value = raw - mean_part
    return value if value > CANCELLATION * raw else 0.0  # raw >= 0: a sum of squares
