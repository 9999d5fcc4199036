"""Predict how a request would fare on a backend at the load it would join, from that cell's model.

Pure functions on plain data (no I/O, no clocks): the caller passes the cell's model (routing/model/cells.py),
the backend's in-flight count, its device (routing/model/harm.py) and, optionally, the engine's own report
(records.EngineHint). Formulas (docs/measurement.md, section 5):

- c = inflight + 1 (the backend's own load this request would join); z = 1 when another backend sharing
  its device has requests in flight, else 0 (a busy neighbour's weights are read every step whatever its
  batch, so on a memory-bound device it is *whether* it is busy that slows this backend, not how busy).
- TTFT(c, z) and TPOT(c, z) from the cell's fits (routing/model/fitting.py, routing/model/regime.py). Fewer
  than `min_samples` successful samples: no prediction.
- Objective, with the harm to the device's in-flight requests (routing/model/harm.py) added as time: ttft ->
  TTFT + harm; e2e -> TTFT + out * TPOT + harm; tokens_per_second -> out / (out * TPOT + harm), higher is
  better (see `_objective_value`).
- Engine hint: fresh report with requests waiting -> TTFT += waiting * mean e2e / max(running, 1) (a slot
  frees about every mean_e2e / running seconds). Stale (older than the reporter's stale limit) or missing
  data is ignored, explicitly, and the "why" says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import assert_never

from gateway.policy.schema import MIN_SAMPLES, Objective
from gateway.records import EngineHint, Sample
from gateway.routing.model.cells import CellModel, build_model
from gateway.routing.model.harm import DeviceLoad, busy_extension, device_harm
from gateway.routing.request.features import DEFAULT_OUTPUT_TOKENS


@dataclass(frozen=True, slots=True)
class PredictConfig:
    min_samples: int = MIN_SAMPLES
    # e2e when neither the request nor the cell tells the output length: the budget the context filter
    # assumes for a request without max_tokens.
    default_output_tokens: int = DEFAULT_OUTPUT_TOKENS
    kv_pressure: float = 0.95  # KV usage at which the engine is about to queue: counts as one waiting


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


def _capacity_queue(c: int, capacity: int | None, mean_e2e: float) -> float:
    """Seconds a request waits for a sequence slot when it would be the c-th on an engine that runs at
    most `capacity` at once: a slot frees about every mean_e2e / capacity seconds. A fit measured below
    the limit cannot show this wait, so it is added where the engine tells its limit."""
    if not capacity or c <= capacity:
        return 0.0
    return (c - capacity) * mean_e2e / capacity


def _objective_value(
    objective: Objective,
    ttft: float | None,
    tpot: float | None,
    output_tokens: float,
    harm: float = 0.0,
    wait: float = 0.0,
) -> float | None:
    """The objective of one request, or None when a figure it needs is missing. ttft: TTFT + harm; e2e:
    TTFT + out * TPOT + harm; tokens_per_second: out / (out * TPOT + wait + harm), the tokens this request
    gets per second of the device's time it takes: decode, the wait its load adds before the first token
    (`wait`: queueing, not its own prefill), and the slow-down it causes (1 / TPOT on an idle engine)."""
    match objective:
        case "ttft":
            return None if ttft is None else ttft + harm
        case "e2e":
            if ttft is None or tpot is None or tpot <= 0:
                return None
            return ttft + output_tokens * tpot + harm
        case "tokens_per_second":
            if tpot is None or tpot <= 0:
                return None
            return output_tokens / (output_tokens * tpot + wait + harm)
        case _:
            assert_never(objective)


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
    repetition: float = 0.0,
    capacity: int | None = None,
    prompt_tokens: int | None = None,
) -> Prediction:
    """`device_busy`: another backend of the device has requests in flight; `device`: every backend of the
    device (this one included) whose in-flight requests this one would slow down (empty: not counted);
    `repetition`: the request's content (records.Features.repetition), which picks the TPOT fit of that
    content once the cell holds enough of it (a speculative engine decodes repetitive content faster);
    `capacity`: the sequences the engine runs at once, where it says (beyond it a request queues);
    `prompt_tokens`: the request's (estimated), which adds prefill beyond the longest prompt measured."""
    cfg = config or PredictConfig()
    c = inflight + 1
    higher = objective == "tokens_per_second"
    if model.samples < cfg.min_samples:
        why = f"{model.samples} successful samples (< {cfg.min_samples}): no prediction"
        return Prediction(backend, objective, c, model.samples, None, None, None, higher, why)
    penalty, hint_why = _queue_penalty(hint, model.mean_e2e, cfg)
    queued = _capacity_queue(c, capacity, model.mean_e2e)
    if queued > penalty:  # the engine's own queue report already counts the same wait: the larger one
        penalty, hint_why = queued, f"{c} over its {capacity} sequences: TTFT +{queued * 1000:.0f} ms"
    ttft = model.ttft.at(c, device_busy) + penalty if model.ttft else None
    # The part of TTFT that load adds (queueing, prefill behind others), not the prompt's own prefill.
    wait = ttft - model.ttft.at(model.ttft.low_c, device_busy) if model.ttft and ttft is not None else 0.0
    me = next((d for d in device if d.backend == backend), None)
    engine = me.model if me is not None else None
    prefill = _longer_prompt(model, prompt_tokens, engine) if ttft is not None else 0.0
    if ttft is not None:
        ttft += prefill
    tpot_fit = model.tpot_for(repetition, cfg.min_samples)
    tpot = tpot_fit.at(c, device_busy) if tpot_fit else None
    out = max_output_tokens or round(model.mean_output_tokens) or cfg.default_output_tokens
    harms: dict[str, float] = {}
    extension = 0.0
    if tpot is not None and device:
        duration = (ttft or 0.0) + out * tpot
        extension = duration if me is None else busy_extension(me, duration)
        harms = device_harm(backend, duration, device, cfg.min_samples)
    harm = sum(harms.values())
    own = _objective_value(objective, ttft, tpot, out, wait=wait)
    value = _objective_value(objective, ttft, tpot, out, harm, wait)
    neighbour = "device busy" if device_busy else "device otherwise idle"
    measured = f"{model.samples} samples at c {model.levels}"
    why = f"{measured}, predicted at c={c}, {neighbour}: {_describe(ttft, tpot)}; {hint_why}"
    if prefill > 0:
        why += f"; prompt of {prompt_tokens} tokens beyond the {model.max_prompt_tokens} measured: "
        why += f"TTFT +{prefill * 1000:.0f} ms"
    if harms:
        parts = ", ".join(f"{name} +{seconds:.3g} s" for name, seconds in harms.items())
        why += f"; keeps {backend} busy {extension:.3g} s beyond its in-flight requests"
        why += f"; slows the device's in-flight requests by {harm:.3g} s ({parts})"
    return Prediction(
        backend,
        objective,
        c,
        model.samples,
        ttft,
        tpot,
        value,
        higher,
        why,
        own,
        harm,
        device_busy,
        extension,
        tuple(harms.items()),
    )


def blended(alone: Prediction, busy: Prediction, share: float) -> Prediction:
    """`alone` (its device otherwise idle) for 1 - share of the request's life and `busy` (beside a busy
    neighbour) for the rest: times mix linearly, so a rate (tokens per second) mixes as the inverse of
    its mixed inverses."""

    def mix(a: float | None, b: float | None, rate: bool = False) -> float | None:
        if a is None or b is None:
            return a
        if not rate:
            return (1 - share) * a + share * b
        return 1.0 / ((1 - share) / a + share / b) if a > 0 and b > 0 else a

    value = mix(alone.value, busy.value, alone.higher_is_better)
    return replace(alone, ttft=mix(alone.ttft, busy.ttft), tpot=mix(alone.tpot, busy.tpot), value=value)


def _longer_prompt(model: CellModel, prompt_tokens: int | None, engine: CellModel | None = None) -> float:
    """Seconds of prefill a prompt longer than any the cell measured adds to its TTFT fit: per token
    beyond its longest, the cell's TTFT at its lowest load over its mean prompt (prefill grows with the
    prompt; a fit measured on short prompts says nothing of a long one's), or the same ratio of the
    engine's all-profile model (`engine`) where that is smaller. 0 within the measured range.

    Either ratio over-counts prefill per token by the fixed part of a TTFT (a scheduler step, the steps
    of a busy batch it waits behind), the more so the shorter the prompts: decode probes' 19-token
    prompts beside a busy neighbour gave 13 ms a token, and a 2k-token request was predicted 25 s of
    prefill on an engine whose 8k-token prompts took under 2 s. The smaller of the two bounds is the
    closer one."""
    longest = model.max_prompt_tokens
    if model.ttft is None or not prompt_tokens or longest <= 0 or prompt_tokens <= longest:
        return 0.0
    rates = [rate for m in (model, engine) if m is not None and (rate := _prefill_bound(m)) is not None]
    return min(rates, default=0.0) * (prompt_tokens - longest)


def _prefill_bound(model: CellModel) -> float | None:
    """Seconds per prompt token a model's TTFT at its lowest load allows at most (None: no TTFT fit)."""
    if model.ttft is None or model.mean_prompt_tokens <= 0:
        return None
    return model.ttft.at(model.ttft.low_c) / model.mean_prompt_tokens


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
