"""Engine /metrics: parse a Prometheus text exposition per flavor, and derive speculative acceptance.

Metric names are those the engines expose (reference: engines.md sections 2, 3.5 and 4.5). prometheus_client
strips `_total` from counter *family* names, so everything here is looked up by *sample* name, which keeps
the suffix exactly as it appears on the wire. Series with several label sets (vLLM data-parallel engines,
SGLang `is_streaming`) are summed, except the KV usage fraction, where the fullest engine is what queues.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from prometheus_client.parser import text_string_to_metric_families

Flavor = Literal["vllm", "sglang", "llamacpp"]
FLAVORS: tuple[Flavor, ...] = ("vllm", "sglang", "llamacpp")
Series = list[tuple[dict[str, str], float]]  # (labels, value) of every sample with one name


@dataclass(frozen=True, slots=True)
class _Names:
    """Where each field lives in one flavor's exposition; the first name present wins."""

    running: tuple[str, ...]
    waiting: tuple[str, ...]
    kv_usage: tuple[str, ...]
    prompt_tokens: tuple[str, ...]
    generation_tokens: tuple[str, ...]
    steps: tuple[str, ...] = ()  # a counter of engine steps, where the flavor has one
    drafts: str | None = None
    draft_tokens: str | None = None
    accepted_tokens: str | None = None
    accepted_per_pos: str | None = None
    accept_length_gauge: str | None = None
    accept_rate_gauge: str | None = None


_NAMES: dict[Flavor, _Names] = {
    "vllm": _Names(
        running=("vllm:num_requests_running",),
        waiting=("vllm:num_requests_waiting",),
        kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # renamed in 0.9.2
        prompt_tokens=("vllm:prompt_tokens_total",),
        generation_tokens=("vllm:generation_tokens_total",),
        steps=("vllm:iteration_tokens_total_count",),  # one observation per engine step
        drafts="vllm:spec_decode_num_drafts_total",
        draft_tokens="vllm:spec_decode_num_draft_tokens_total",
        accepted_tokens="vllm:spec_decode_num_accepted_tokens_total",
        accepted_per_pos="vllm:spec_decode_num_accepted_tokens_per_pos_total",
    ),
    "sglang": _Names(
        running=("sglang:num_running_reqs",),
        waiting=("sglang:num_queue_reqs",),
        kv_usage=("sglang:token_usage",),
        prompt_tokens=("sglang:prompt_tokens_total",),
        generation_tokens=("sglang:generation_tokens_total",),
        accept_length_gauge="sglang:spec_accept_length",
        accept_rate_gauge="sglang:spec_accept_rate",
    ),
    "llamacpp": _Names(
        running=("llamacpp:requests_processing",),
        waiting=("llamacpp:requests_deferred",),
        kv_usage=("llamacpp:kv_cache_usage_ratio",),  # only builds from before llama.cpp#13660
        prompt_tokens=("llamacpp:prompt_tokens_total",),
        generation_tokens=("llamacpp:tokens_predicted_total",),
        steps=("llamacpp:n_decode_total",),  # one per llama_decode call, prompt batches included
        drafts="llamacpp:spec_decode_num_drafts_total",
        draft_tokens="llamacpp:spec_decode_num_draft_tokens_total",
        accepted_tokens="llamacpp:spec_decode_num_accepted_tokens_total",
        accepted_per_pos="llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
    ),
}

# llama.cpp counts cached prompt tokens separately in current builds; adding them back makes
# `prompt_tokens_total` mean "all prompt tokens" for every flavor.
_LLAMACPP_CACHED = "llamacpp:prompt_tokens_cached_total"


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """Cumulative speculative-decoding counters since the engine started."""

    drafts: float | None  # None where the engine does not count drafts
    draft_tokens: float
    accepted_tokens: float
    accepted_per_pos: tuple[float, ...] = ()  # index = draft position


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    flavor: Flavor
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # fraction 0..1 of the KV pool in use
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    steps_total: float | None = None  # engine steps (vLLM iterations, llama.cpp decode calls)
    spec: SpecCounters | None = None  # None: the engine exposes no speculative counters
    spec_accept_length: float | None = None  # SGLang's gauge (accepted drafts + bonus token per step)
    spec_accept_rate: float | None = None  # SGLang's gauge (accepted / proposed drafts)


@dataclass(frozen=True, slots=True)
class SpecAcceptance:
    """Speculative acceptance over an interval (or since start).

    acceptance_rate = accepted / draft tokens; mean_acceptance_length = 1 + accepted / drafts (the +1 is the
    bonus token the target model always emits); per_position[i] = accepted at position i / drafts.
    """

    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position: tuple[float, ...] = ()
    drafts: float | None = None
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    source: str = "counters"  # "counters" | "gauges" | "timings"
    counter_reset: bool = False  # the engine restarted between the two scrapes


def _wanted(names: _Names) -> frozenset[str]:
    found: list[str] = [*names.running, *names.waiting, *names.kv_usage]
    found += [*names.prompt_tokens, *names.generation_tokens, *names.steps, _LLAMACPP_CACHED]
    optional = (names.drafts, names.draft_tokens, names.accepted_tokens, names.accepted_per_pos)
    found += [n for n in (*optional, names.accept_length_gauge, names.accept_rate_gauge) if n]
    return frozenset(found)


_WANTED: dict[Flavor, frozenset[str]] = {flavor: _wanted(names) for flavor, names in _NAMES.items()}


def _relevant(text: str, wanted: frozenset[str]) -> str:
    """Only the sample lines we read: a vLLM exposition is mostly histogram buckets, and handing all of
    it to the parser costs ~10 ms per scrape on the event loop. Names are kept exactly (TYPE lines are
    dropped, so prometheus_client keeps each sample's own name)."""
    kept = []
    for line in text.splitlines():
        if line and line[0] != "#":
            end = len(line)
            for stop in ("{", " "):
                at = line.find(stop)
                if at != -1:
                    end = min(end, at)
            if line[:end] in wanted:
                kept.append(line)
    if not kept:
        raise ValueError("no engine metrics of this flavor in the response")
    return "\n".join(kept) + "\n"


def _index(text: str) -> dict[str, Series]:
    by_name: dict[str, Series] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            by_name.setdefault(sample.name, []).append((sample.labels, float(sample.value)))
    return by_name


def _finite(values: Iterable[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def _sum(index: Mapping[str, Series], names: Iterable[str]) -> float | None:
    for name in names:
        values = _finite(v for _, v in index.get(name, ()))
        if values:
            return sum(values)
    return None


def _max(index: Mapping[str, Series], names: Iterable[str]) -> float | None:
    for name in names:
        values = _finite(v for _, v in index.get(name, ()))
        if values:
            return max(values)
    return None


def _per_position(series: Iterable[tuple[dict[str, str], float]]) -> tuple[float, ...]:
    totals: dict[int, float] = {}
    for labels, value in series:
        position = labels.get("position", "")
        if position.isdigit() and math.isfinite(value):
            totals[int(position)] = totals.get(int(position), 0.0) + value
    if not totals:
        return ()
    return tuple(totals.get(i, 0.0) for i in range(max(totals) + 1))


def _spec_counters(index: Mapping[str, Series], names: _Names) -> SpecCounters | None:
    if names.draft_tokens is None or names.accepted_tokens is None:
        return None
    draft_tokens = _sum(index, (names.draft_tokens,))
    accepted = _sum(index, (names.accepted_tokens,))
    if draft_tokens is None or accepted is None:
        return None  # the series exist only when speculative decoding is configured
    drafts = _sum(index, (names.drafts,)) if names.drafts else None
    per_pos = _per_position(index.get(names.accepted_per_pos, ())) if names.accepted_per_pos else ()
    return SpecCounters(drafts, draft_tokens, accepted, per_pos)


def parse_metrics(text: str, flavor: Flavor) -> EngineMetrics:
    """Parse one /metrics body. Raises ValueError on a malformed exposition or an unknown flavor."""
    if flavor not in _NAMES:
        raise ValueError(f"unknown engine flavor {flavor!r}")
    names = _NAMES[flavor]
    index = _index(_relevant(text, _WANTED[flavor]))
    prompt = _sum(index, names.prompt_tokens)
    if flavor == "llamacpp" and prompt is not None:
        prompt += _sum(index, (_LLAMACPP_CACHED,)) or 0.0
    gauge_length = _max(index, (names.accept_length_gauge,)) if names.accept_length_gauge else None
    gauge_rate = _max(index, (names.accept_rate_gauge,)) if names.accept_rate_gauge else None
    return EngineMetrics(
        flavor=flavor,
        running=_sum(index, names.running),
        waiting=_sum(index, names.waiting),
        kv_usage=_max(index, names.kv_usage),
        prompt_tokens_total=prompt,
        generation_tokens_total=_sum(index, names.generation_tokens),
        steps_total=_sum(index, names.steps),
        spec=_spec_counters(index, names),
        spec_accept_length=gauge_length,
        spec_accept_rate=gauge_rate,
    )


def progress_counters(metrics: EngineMetrics) -> tuple[float | None, ...] | None:
    """What moves while an engine computes, and only then: prompt and generation tokens, steps, and the
    KV cache in use (which grows with each chunk of a long prefill, before any token is counted). None
    when the exposition has none of them. Queue gauges are left out: requests arriving at a wedged
    engine change them."""
    values = (
        metrics.prompt_tokens_total,
        metrics.generation_tokens_total,
        metrics.steps_total,
        metrics.kv_usage,
    )
    return values if any(v is not None for v in values) else None


def progressed(previous: EngineMetrics | None, current: EngineMetrics) -> bool:
    """The engine computed something between two scrapes (a restart, counters going down, counts)."""
    before = progress_counters(previous) if previous is not None else None
    now = progress_counters(current)
    return before is not None and now is not None and before != now


def _delta(previous: float | None, current: float | None, reset: bool) -> float | None:
    if current is None:
        return None
    if reset or previous is None:
        return current  # after a restart the counter started again from zero
    return current - previous


def _is_reset(previous: SpecCounters, current: SpecCounters) -> bool:
    pairs = [
        (previous.draft_tokens, current.draft_tokens),
        (previous.accepted_tokens, current.accepted_tokens),
    ]
    if previous.drafts is not None and current.drafts is not None:
        pairs.append((previous.drafts, current.drafts))
    pairs.extend(zip(previous.accepted_per_pos, current.accepted_per_pos, strict=False))
    return any(now < before for before, now in pairs)


def _from_counters(delta: SpecCounters, reset: bool) -> SpecAcceptance:
    drafts = delta.drafts or 0.0
    return SpecAcceptance(
        acceptance_rate=delta.accepted_tokens / delta.draft_tokens if delta.draft_tokens > 0 else None,
        mean_acceptance_length=1.0 + delta.accepted_tokens / drafts if drafts > 0 else None,
        per_position=tuple(a / drafts for a in delta.accepted_per_pos) if drafts > 0 else (),
        drafts=delta.drafts,
        draft_tokens=delta.draft_tokens,
        accepted_tokens=delta.accepted_tokens,
        counter_reset=reset,
    )


def acceptance_between(previous: EngineMetrics | None, current: EngineMetrics) -> SpecAcceptance | None:
    """Acceptance over the interval between two scrapes of one backend (since start when `previous` is None).

    A counter that went down means the engine restarted: the current values are then the whole interval's
    delta (Prometheus' rate() does the same), so no figure is ever negative. SGLang exposes gauges, not
    counters, so its acceptance is read as-is. None when the engine exposes no speculative data.
    """
    spec = current.spec
    if spec is None:
        return _from_gauges(current)
    before = previous.spec if previous is not None else None
    reset = before is not None and _is_reset(before, spec)
    old_pos = before.accepted_per_pos if before is not None else ()
    delta = SpecCounters(
        drafts=_delta(before.drafts if before else None, spec.drafts, reset),
        draft_tokens=_delta(before.draft_tokens if before else None, spec.draft_tokens, reset) or 0.0,
        accepted_tokens=_delta(before.accepted_tokens if before else None, spec.accepted_tokens, reset)
        or 0.0,
        accepted_per_pos=tuple(
            _delta(old_pos[i] if i < len(old_pos) else None, value, reset) or 0.0
            for i, value in enumerate(spec.accepted_per_pos)
        ),
    )
    return _from_counters(delta, reset)


def _from_gauges(current: EngineMetrics) -> SpecAcceptance | None:
    length = current.spec_accept_length
    if length is None or length <= 0:
        return None  # SGLang registers the gauge even without speculative decoding and leaves it at 0
    rate = current.spec_accept_rate if current.spec_accept_rate and current.spec_accept_rate > 0 else None
    return SpecAcceptance(acceptance_rate=rate, mean_acceptance_length=length, source="gauges")


def _count(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def acceptance_from_timings(timings: Mapping[str, Any]) -> SpecAcceptance | None:
    """Acceptance of one llama.cpp response from its `timings.draft_n` / `draft_n_accepted`.

    The fields appear only when drafting happened. llama.cpp does not report the number of drafting steps
    per response, so the mean acceptance length is unknown here (None).
    """
    drafted, accepted = _count(timings.get("draft_n")), _count(timings.get("draft_n_accepted"))
    if drafted is None or accepted is None or drafted <= 0:
        return None
    accepted = min(max(accepted, 0.0), drafted)
    return SpecAcceptance(
        acceptance_rate=accepted / drafted,
        mean_acceptance_length=None,
        draft_tokens=drafted,
        accepted_tokens=accepted,
        source="timings",
    )
