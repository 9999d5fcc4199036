"""llama-server's /metrics: `llamacpp:*` counters and gauges without labels, in the order and wording of the
real server, plus the per-position acceptance counter when speculative decoding ran."""

from __future__ import annotations

from gateway.sim.flavors.base import EngineView


def metrics_text(engine: EngineView) -> str:
    """The /metrics page as the server writes it."""
    lines: list[str] = []
    for kind, rows in (("counter", _counters(engine)), ("gauge", _gauges(engine))):
        for name, doc, value in rows:
            lines += [
                f"# HELP llamacpp:{name} {doc}",
                f"# TYPE llamacpp:{name} {kind}",
                f"llamacpp:{name} {_number(value)}",
            ]
    per_pos = engine.stats.spec_accepted_per_pos
    if engine.spec.perf.speculative is not None and engine.stats.spec_drafts_total > 0 and per_pos:
        name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
        lines += [f"# HELP {name} Accepted tokens per draft position", f"# TYPE {name} counter"]
        # Integers here: the server prints these from uint64 counters, not through a double.
        lines += [f'{name}{{position="{i}"}} {count}' for i, count in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


def _counters(engine: EngineView) -> list[tuple[str, str, float]]:
    """Name, HELP and value of every counter, in the order and wording of the real server."""
    stats, obs = engine.stats, engine.observed
    return [
        (
            "prompt_tokens_total",
            "Number of prompt tokens processed, excluding cached tokens",
            stats.prompt_tokens_total,
        ),
        # The twin keeps no prompt cache, so nothing is ever reused (timings.cache_n is 0 too).
        ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", 0),
        ("prompt_seconds_total", "Total time spent processing prompts", obs.prompt_seconds_total),
        ("tokens_predicted_total", "Number of generation tokens processed", stats.generation_tokens_total),
        ("tokens_predicted_seconds_total", "Total time spent generating tokens", obs.predicted_seconds_total),
        (
            "n_decode_total",
            "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
            obs.decode_steps_total,
        ),
        ("n_tokens_max", "Largest observed sequence length (prompt + generation)", obs.max_tokens_in_request),
        (
            "spec_decode_num_draft_tokens_total",
            "Speculative: Total draft tokens generated",
            stats.spec_draft_tokens_total,
        ),
        (
            "spec_decode_num_accepted_tokens_total",
            "Speculative: Total draft tokens accepted by the target model",
            stats.spec_accepted_tokens_total,
        ),
        (
            "spec_decode_num_drafts_total",
            "Speculative: Total speculative decoding verification steps",
            stats.spec_drafts_total,
        ),
    ]


def _gauges(engine: EngineView) -> list[tuple[str, str, float]]:
    stats, obs = engine.stats, engine.observed
    return [
        (
            "prompt_tokens_seconds",
            "Average prompt throughput in tokens/s",
            _rate(stats.prompt_tokens_total, obs.prompt_seconds_total),
        ),
        (
            "predicted_tokens_seconds",
            "Average generation throughput in tokens/s",
            _rate(stats.generation_tokens_total, obs.predicted_seconds_total),
        ),
        ("requests_processing", "Number of requests processing", stats.running),
        ("requests_deferred", "Number of requests deferred", stats.waiting),
        ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call", stats.running),
    ]


def _rate(tokens: int, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else 0.0


def _number(value: float) -> str:
    """A value as the server writes it: a double through a C++ ostream, i.e. printf %g with six
    significant digits (42, 0.25, 1.23457e+06), never Python's 42.0."""
    return f"{float(value):g}"
