"""How a cell measured at one load only is expected to slow down at higher loads, borrowed from the cells
of the same profile that were measured at several: pure arithmetic on fitted models.

A cell whose samples all met one concurrency has no slope: its fit is flat, and predicts the time it took
at c = 1 for a request that would be the 17th. Such a backend then looks as fast under a burst as when it
was alone, and takes traffic a load balancer would have spread (a BF16 engine measured by a single user
took 9 of a 48-request burst from an NVFP4 engine three times faster). Engines serving the same profile
batch alike to first order (the same model's decode steps, prefill chunks and queueing), so such a cell
borrows a relative slope (slope / value at the lowest load measured): its own engine's, over every
profile, where that was measured at several loads (the same engine with other prompts), else the median
of the profile's other cells that were; applied to its own value at the load it was measured at. Its
value there does not change; only the extrapolation does, until its own samples at other loads give it a
slope of its own.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from gateway.routing.cells import CellModel
from gateway.routing.fitting import Fit

FitOf = Callable[[CellModel], Fit | None]


def _relative_slope(fit: Fit) -> float | None:
    base = fit.intercept + fit.slope * fit.low_c
    return fit.slope / base if fit.slope > 0 and base > 0 else None


def _borrowed(fit: Fit | None, relative: float | None) -> Fit | None:
    if fit is None or relative is None or fit.slope > 0:
        return fit
    base = fit.intercept  # a flat fit: its value at the load it was measured at
    slope = base * relative
    return replace(fit, intercept=base - slope * fit.low_c, slope=slope)


def _spans(model: CellModel) -> bool:
    return model.samples > 0 and model.max_c > model.ttft_low_c()


def _shared(models: Iterable[CellModel], fit_of: FitOf) -> float | None:
    slopes = [r for m in models if _spans(m) and (f := fit_of(m)) and (r := _relative_slope(f)) is not None]
    return statistics.median(slopes) if slopes else None


def _flat(model: CellModel, ttft: float | None, tpot: float | None) -> CellModel:
    by_content = (_borrowed(model.tpot_by_content[0], tpot), _borrowed(model.tpot_by_content[1], tpot))
    return replace(
        model, ttft=_borrowed(model.ttft, ttft), tpot=_borrowed(model.tpot, tpot), tpot_by_content=by_content
    )


def with_borrowed_slopes(
    models: Mapping[str, CellModel], engines: Mapping[str, CellModel] | None = None
) -> dict[str, CellModel]:
    """Every model measured at one concurrency level only, with TTFT and TPOT slopes borrowed (module
    docstring): from its own engine's model over all profiles (`engines`, by backend) where that one was
    measured at several loads, else from the other models measured at several; the others unchanged."""
    spanning = [m for m in models.values() if _spans(m)]
    pooled = (_shared(spanning, lambda m: m.ttft), _shared(spanning, lambda m: m.tpot))
    out: dict[str, CellModel] = {}
    for name, model in models.items():
        if model.samples == 0 or _spans(model):
            out[name] = model
            continue
        engine = (engines or {}).get(name)
        own = (engine,) if engine is not None and _spans(engine) else ()
        ttft = _shared(own, lambda m: m.ttft) if own else None
        tpot = _shared(own, lambda m: m.tpot) if own else None
        ttft, tpot = ttft if ttft is not None else pooled[0], tpot if tpot is not None else pooled[1]
        out[name] = model if ttft is None and tpot is None else _flat(model, ttft, tpot)
    return out
