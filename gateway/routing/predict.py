"""Predict how a request would fare on a backend at the load it would join, from that cell's live samples.

Pure functions on plain data (no I/O, no clocks): the router passes the cell's samples, the backend's
in-flight count and, optionally, the latest engine /metrics scrape. Formulas (docs/measurement.md):

- c = inflight + 1 (the backend's own load this request would join); z = 1 when another backend sharing
  its device has requests in flight, else 0 (a busy neighbour's weights are read every step whatever its
  batch, so on a memory-bound device it is *whether* it is busy that slows this backend, not how busy).
- TTFT(c, z) and TPOT(c, z): ordinary least squares of the samples' TTFT and TPOT against
  y = a + b * c + g * z (c: concurrency at dispatch; z: `device_share`, the share of the sample's life a
  neighbour was busy), evaluated at (c, z). b and g
  are clamped at >= 0 (more load never makes a request faster; a negative coefficient is noise), c is
  clamped up to the lowest measured level (no extrapolation towards idle), and the result is never below
  the fastest value measured. A regressor that does not vary in the samples is left out (one concurrency
  level and no neighbour measured: the mean). Fewer than `min_samples` successful samples: no prediction.
- Objective: ttft -> TTFT; e2e -> TTFT + max_output_tokens * TPOT; tokens_per_second -> 1 / TPOT (higher
  is better); each with the harm below added as time (see `_objective_value`).
- Harm to the requests already in flight on the device (`device_harm`): the request lasts
  D = TTFT + out * TPOT on its engine i. Two parts, for the backends j of the device with n_j > 0 in flight:

      own batch (j = i):    n_i * min(r_i, D / TPOT_i') * (TPOT_i(n_i + 1, z) - TPOT_i(n_i, z))
      neighbour (j != i):   n_j * min(r_j, X / TPOT_j') * (TPOT_j(n_j, 1) - TPOT_j(n_j, 0))
      X = max(0, D - R_i),  R_i = E_i * n_i / (n_i + 1)

  X is how much longer engine i stays busy because of this request: its residence D beyond R_i, the
  longest remaining time of the n_i requests already there (each has a remaining time spread evenly over
  [0, E_i], E_i being i's mean e2e over all its samples, so the longest of n_i is expected at
  E_i * n_i / (n_i + 1); an idle engine has R_i = 0, X = D). For X seconds the neighbour j shares the device
  instead of having it to itself, so each of its requests decodes its tokens TPOT_j(n_j, 1) - TPOT_j(n_j, 0)
  slower (the fitted contention term, learned from `device_share`). A neighbour that a third busy backend
  keeps sharing the device anyway is not charged. TPOT_j' is j's TPOT with this request in place, fits are
  over all of j's samples (any profile), r_j = half j's mean output (an in-flight request is half done, on
  average) and n_j stands for the neighbour's load over the whole window. Separate devices: no neighbour.
- Engine hint: fresh scrape with requests waiting -> TTFT += waiting * mean e2e / max(running, 1) (a slot
  frees about every mean_e2e / running seconds). Stale (older than the scraper's stale limit) or missing
  data is ignored, explicitly, and the "why" says so.
- Regime change (`fit_current`): when a cell's newest 5 points all sit more than 2x above (or below) the
  fit of the points before them, at loads those points covered, the fit restarts from the trailing run, so
  a backend that slows down is noticed after 5 samples however long its window.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.backends.scraper import ScrapeResult
from gateway.records import Sample
from gateway.stats.live import LiveRecorder

Objective = Literal["ttft", "e2e", "tokens_per_second"]
OBJECTIVES: tuple[Objective, ...] = ("ttft", "e2e", "tokens_per_second")
LoadPoint = tuple[float, float, float]  # (concurrency, device share, value)
MAX_EPSILON = 0.5  # exploration never takes more than half of a profile's traffic, whatever the policy says


@dataclass(frozen=True, slots=True)
class PredictConfig:
    min_samples: int = 5
    default_output_tokens: int = 256  # e2e when neither the request nor the cell tells the output length
    kv_pressure: float = 0.95  # KV usage at which the engine is about to queue: counts as one waiting


@dataclass(frozen=True, slots=True)
class EngineHint:
    """What the engine itself reports, and how old that report is."""

    waiting: float | None
    running: float | None
    kv_usage: float | None
    age_s: float
    stale_after_s: float

    @property
    def fresh(self) -> bool:
        return self.age_s <= self.stale_after_s


def hint_from_scrape(result: ScrapeResult | None, now: float, stale_after_s: float) -> EngineHint | None:
    """`now` is on the scraper's clock (MetricsScraper.now())."""
    if result is None:
        return None
    m = result.metrics
    return EngineHint(m.waiting, m.running, m.kv_usage, result.age(now), stale_after_s)


@dataclass(frozen=True, slots=True)
class Prediction:
    backend: str
    objective: Objective
    concurrency: int
    samples: int
    ttft: float | None  # seconds
    tpot: float | None  # seconds per output token, decode only
    value: float | None  # the objective, harm included; None: not enough data
    higher_is_better: bool
    why: str
    own_value: float | None = None  # the objective of this request alone
    harm: float = 0.0  # seconds this request adds to the requests in flight on its device
    device_busy: bool = False  # another backend on its device had requests in flight
    extension: float = 0.0  # seconds this request keeps its engine busy beyond the requests already there
    harm_by_backend: tuple[tuple[str, float], ...] = ()  # the harm's parts, per backend slowed


@dataclass(frozen=True, slots=True)
class Fit:
    intercept: float
    slope: float
    low_c: float  # lowest measured concurrency
    floor: float  # fastest measured value
    contention: float = 0.0  # added while another backend on the device is busy

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
    return Fit(mean_y - slope * mean_c, slope, low_c, min(y for _, y in points))


def fit_load(points: Sequence[tuple[float, float, float]]) -> Fit | None:
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
        if y < floor:
            floor = y
    mc, mz, my = sc / n, sz / n, sy / n
    # Centring raw sums leaves rounding noise where a regressor never varied: that is no variance at all.
    scc = _centred(rcc, n * mc * mc)
    szz = _centred(rzz, n * mz * mz)
    scz, scy, szy = rcz - n * mc * mz, rcy - n * mc * my, rzy - n * mz * my
    b = g = 0.0
    det = scc * szz - scz * scz
    if scc > 0 and szz > 0 and det > 1e-12 * scc * szz:
        b, g = (szz * scy - scz * szy) / det, (scc * szy - scz * scy) / det
        if b < 0:
            b, g = 0.0, max(0.0, szy / szz)
        elif g < 0:
            b, g = max(0.0, scy / scc), 0.0
    elif scc > 0:  # z constant, or z and c move together: c alone
        b = max(0.0, scy / scc)
    elif szz > 0:
        g = max(0.0, szy / szz)
    return Fit(my - b * mc - g * mz, b, low_c, floor, g)


def _centred(raw: float, mean_part: float) -> float:
    value = raw - mean_part
    return value if value > 1e-9 * max(raw, 1e-300) else 0.0


def fit_current(points: Sequence[LoadPoint], run: int = 5, factor: float = 2.0) -> Fit | None:
    """fit_load over the points of the engine's current regime, oldest point first.

    A window of 256 samples remembers a backend that has since slowed down (a throttled GPU, a restart with
    another config, a new tenant): a fit over all of it would need about as many new samples as old ones to
    notice. So when the newest `run` points all sit more than `factor` above the fit of the points before
    them (or all below it by as much), at a concurrency and device share those points already covered, the
    engine changed: the fit restarts from the trailing points that differ the same way. A burst at a load
    never measured before is not a change (the fit may simply not extrapolate that far), nor is noise on
    both sides.
    """
    older = points[:-run]
    before = fit_load(older) if len(older) >= run else None
    if before is None:
        return fit_load(points)
    c_low, c_high = min(c for c, _, _ in older), max(c for c, _, _ in older)
    z_low, z_high = min(z for _, z, _ in older), max(z for _, z, _ in older)

    def side(point: LoadPoint) -> int:
        c, z, y = point
        if not (c_low <= c <= c_high and z_low - 0.25 <= z <= z_high + 0.25):
            return 0
        expected = max(before.intercept + before.slope * c + before.contention * z, before.floor)
        return 1 if y > factor * expected else -1 if y * factor < expected else 0

    first = side(points[-1])
    length = 1
    while first != 0 and length < len(points) and side(points[-1 - length]) == first:
        length += 1
    if first == 0 or length < run:
        return fit_load(points)
    return fit_load(points[-length:])


def _queue_penalty(hint: EngineHint | None, mean_e2e: float, config: PredictConfig) -> tuple[float, str]:
    if hint is None:
        return 0.0, "no engine metrics: gateway-side only"
    if not hint.fresh:
        return 0.0, f"engine metrics stale ({hint.age_s:.1f}s > {hint.stale_after_s:.1f}s): ignored"
    waiting = hint.waiting or 0.0
    if hint.kv_usage is not None and hint.kv_usage >= config.kv_pressure:
        waiting = max(waiting, 1.0)
    if waiting <= 0:
        return 0.0, "engine queue empty"
    penalty = waiting * mean_e2e / max(hint.running or 0.0, 1.0)
    return penalty, f"engine queue {waiting:g} waiting: TTFT +{penalty * 1000:.0f} ms"


def _objective_value(
    objective: Objective, ttft: float | None, tpot: float | None, output_tokens: float, harm: float = 0.0
) -> float | None:
    """ttft: TTFT + harm; e2e: TTFT + out * TPOT + harm; tokens_per_second: out / (out * TPOT + harm),
    the tokens this request gets per second of decode time it costs the device (1 / TPOT without harm)."""
    if objective == "ttft":
        return None if ttft is None else ttft + harm
    if tpot is None or tpot <= 0:
        return None
    if objective == "tokens_per_second":
        return output_tokens / (output_tokens * tpot + harm)
    return None if ttft is None else ttft + output_tokens * tpot + harm


@dataclass(frozen=True, slots=True)
class DeviceLoad:
    """One backend of the candidate's device (the candidate itself included), as the router sees it now."""

    backend: str
    inflight: int
    device_busy: bool  # some *other* backend of the device has requests in flight
    model: CellModel  # fitted over all of this backend's samples, any profile


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
    candidate: str, duration: float, device: Sequence[DeviceLoad], min_samples: int = 5
) -> dict[str, float]:
    """Seconds a request on `candidate` lasting `duration` adds to each backend's in-flight requests.

        own batch:  harm_i = n_i * min(r_i, D / TPOT_i') * (TPOT_i(n_i + 1) - TPOT_i(n_i))
        neighbour:  harm_j = n_j * min(r_j, X / TPOT_j') * (TPOT_j(n_j, busy) - TPOT_j(n_j, alone))
                    X = busy_extension(candidate, D)           (formulas in the module docstring)

    Backends without in-flight requests or without a TPOT fit over min_samples samples add nothing.
    """
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
        remaining = j.model.mean_output_tokens / 2  # an in-flight request is half done, on average
        harm[j.backend] = j.inflight * min(remaining, window / after) * (after - before)
    return harm


@dataclass(frozen=True, slots=True)
class CellModel:
    """What one cell's samples say, reduced to what a prediction needs; cheap to evaluate at any c."""

    samples: int  # successful samples with a TTFT
    ttft: Fit | None
    tpot: Fit | None
    mean_e2e: float
    mean_output_tokens: float
    levels: str  # measured concurrency span, e.g. "1..16"
    recent_concurrency: float = 0.0  # mean load its newest requests met: how busy it tends to be now


def build_model(samples: Sequence[Sample]) -> CellModel:
    ok = [s for s in samples if not s.error and s.ttft is not None]
    if not ok:
        return CellModel(0, None, None, 0.0, 0.0, "-")
    ttft_points = [(float(s.concurrency), _busy(s), s.ttft) for s in ok if s.ttft is not None]
    tpot_points = [(float(s.concurrency), _busy(s), t) for s in ok if (t := s.tpot) is not None]
    levels = sorted({s.concurrency for s in ok})
    span = str(levels[0]) if len(levels) == 1 else f"{levels[0]}..{levels[-1]}"
    return CellModel(
        samples=len(ok),
        ttft=fit_current(ttft_points),
        tpot=fit_current(tpot_points),
        mean_e2e=sum(s.e2e for s in ok) / len(ok),
        mean_output_tokens=sum(s.output_tokens for s in ok) / len(ok),
        levels=span,
        recent_concurrency=sum(s.concurrency for s in ok[-16:]) / len(ok[-16:]),
    )


def _busy(sample: Sample) -> float:
    return sample.device_share


def predict(
    backend: str,
    samples: Sequence[Sample],
    *,
    inflight: int,
    objective: Objective,
    max_output_tokens: int | None = None,
    hint: EngineHint | None = None,
    config: PredictConfig | None = None,
) -> Prediction:
    """Predicted outcome of one more request on `backend` for the profile whose samples are given."""
    model = build_model(samples)
    return predict_with_model(
        backend,
        model,
        inflight=inflight,
        objective=objective,
        max_output_tokens=max_output_tokens,
        hint=hint,
        config=config,
    )


def predict_with_model(
    backend: str,
    model: CellModel,
    *,
    inflight: int,
    objective: Objective,
    max_output_tokens: int | None = None,
    hint: EngineHint | None = None,
    config: PredictConfig | None = None,
    device_busy: bool = False,
    device: Sequence[DeviceLoad] = (),
) -> Prediction:
    """`device_busy`: another backend of the device has requests in flight; `device`: every backend of the
    device (this one included) whose in-flight requests this one would slow down (empty: not counted)."""
    cfg = config or PredictConfig()
    c = inflight + 1
    higher = objective == "tokens_per_second"
    if model.samples < cfg.min_samples:
        why = f"{model.samples} successful samples (< {cfg.min_samples}): no prediction"
        return Prediction(backend, objective, c, model.samples, None, None, None, higher, why)
    penalty, hint_why = _queue_penalty(hint, model.mean_e2e, cfg)
    ttft = model.ttft.at(c, device_busy) + penalty if model.ttft else None
    tpot = model.tpot.at(c, device_busy) if model.tpot else None
    out = max_output_tokens or round(model.mean_output_tokens) or cfg.default_output_tokens
    harms: dict[str, float] = {}
    extension = 0.0
    if tpot is not None and device:
        duration = (ttft or 0.0) + out * tpot
        me = next((d for d in device if d.backend == backend), None)
        extension = duration if me is None else busy_extension(me, duration)
        harms = device_harm(backend, duration, device, cfg.min_samples)
    harm = sum(harms.values())
    own = _objective_value(objective, ttft, tpot, out)
    value = _objective_value(objective, ttft, tpot, out, harm)
    neighbour = "device busy" if device_busy else "device otherwise idle"
    measured = f"{model.samples} samples at c {model.levels}"
    why = f"{measured}, predicted at c={c}, {neighbour}: {_describe(ttft, tpot)}; {hint_why}"
    if harms:
        parts = ", ".join(f"{name} +{seconds:.3g} s" for name, seconds in harms.items())
        why += f"; keeps {backend} busy {extension:.3g} s beyond its in-flight requests"
        why += f"; slows the device's in-flight requests by {harm:.3g} s ({parts})"
    return Prediction(
        backend, objective, c, model.samples, ttft, tpot, value, higher, why, own, harm, device_busy,
        extension, tuple(harms.items()),
    )


class ModelCache:
    """CellModels per (backend, profile), rebuilt only when the recorder says the cell changed.

    Fitting 256 samples costs a few hundred microseconds in Python; a decision touches every eligible
    backend, so the fit is cached and invalidated by the cell's version. Bounded like the recorder.
    """

    def __init__(self, max_entries: int = 512) -> None:
        self._max = max_entries
        self._models: dict[tuple[str, str], tuple[int, CellModel]] = {}
        self._backends: dict[str, tuple[tuple[int, ...], CellModel]] = {}

    def get(self, recorder: LiveRecorder, backend: str, profile: str, now: float | None = None) -> CellModel:
        key = (backend, profile)
        version = recorder.version(backend, profile, now)
        cached = self._models.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        model = build_model(recorder.samples(backend, profile, now))
        if key not in self._models and len(self._models) >= self._max:
            del self._models[next(iter(self._models))]  # oldest insertion first: cheap and bounded
        self._models[key] = (version, model)
        return model

    def backend(self, recorder: LiveRecorder, backend: str, now: float | None = None) -> CellModel:
        """The model over all of `backend`'s samples (every profile): how load and its device slow it."""
        version = recorder.backend_version(backend, now)
        cached = self._backends.get(backend)
        if cached is not None and cached[0] == version:
            return cached[1]
        model = build_model(recorder.backend_samples(backend, now))
        if backend not in self._backends and len(self._backends) >= self._max:
            del self._backends[next(iter(self._backends))]
        self._backends[backend] = (version, model)
        return model


def _describe(ttft: float | None, tpot: float | None) -> str:
    ttft_text = f"TTFT {ttft * 1000:.0f} ms" if ttft is not None else "TTFT n/a"
    tpot_text = f"TPOT {tpot * 1000:.1f} ms" if tpot is not None else "TPOT n/a (no decode measured)"
    return f"{ttft_text}, {tpot_text}"


def rank(predictions: Iterable[Prediction]) -> list[str]:
    """Backends best first by objective value; those without a prediction keep their order at the end."""
    items = list(predictions)
    known = [p for p in items if p.value is not None]
    known.sort(key=lambda p: -p.value if p.higher_is_better and p.value is not None else (p.value or 0.0))
    return [p.backend for p in known] + [p.backend for p in items if p.value is None]


@dataclass(frozen=True, slots=True)
class Exploration:
    backend: str
    why: str


def pick_exploration(
    sample_counts: Mapping[str, int],
    credit: float,
    *,
    min_samples: int = 5,
    epsilon: float = 0.05,
    share: Callable[[str], float] = lambda backend: 1.0,
) -> tuple[Exploration | None, float]:
    """Send this request to an under-measured backend instead of the predicted best, or not (None); and the
    profile's exploration credit after this request.

    `sample_counts` maps each backend that could be explored (the predicted winner is measured by its own
    traffic and left out) to its sample count for this request's profile. While some have fewer than
    `min_samples`, the least measured of them (ties by name) is the candidate and every request adds
    epsilon (capped at MAX_EPSILON, so the cost is bounded whatever the policy says) times `share(candidate)`
    to the credit; the request that brings it to 1 explores and spends 1. Paced, not drawn: at epsilon 0.25
    every fourth request of the profile explores, so a cell is measured within min_samples / epsilon
    requests, never after a run of bad luck, and decisions replay exactly. `share` below 1 makes a costly
    moment accrue less (see AdaptiveScorer). Windows age out, so a backend that stops getting traffic drops
    below `min_samples` and is measured again: every backend x profile cell stays measured.
    """
    under = sorted((n, backend) for backend, n in sample_counts.items() if n < min_samples)
    if not under:
        return None, 0.0  # nothing to measure: no debt carried into the next gap
    n, backend = under[0]
    rate = min(max(epsilon, 0.0), MAX_EPSILON) * share(backend)
    credit += rate
    if credit < 1.0 - 1e-9:  # a sum of float rates may fall just short of the 1 it adds up to
        return None, credit
    why = f"{backend}: {n} samples (< {min_samples}), explored at rate {rate:.3g} per request"
    return Exploration(backend, why), credit - 1.0
