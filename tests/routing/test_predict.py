"""Prediction of TTFT / TPOT at the load a request would join, engine hints, and the cell-model cache."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from gateway.backends.engine_metrics import EngineMetrics
from gateway.backends.scraper import ScrapeResult, hint_from_scrape
from gateway.records import EngineHint, Sample
from gateway.routing.model.cells import ModelCache, build_model
from gateway.routing.model.harm import DeviceLoad
from gateway.routing.model.predict import predict, predict_with_model, rank
from gateway.stats.live import LiveRecorder


def cell(ttft: tuple[float, float], tpot: tuple[float, float], levels: range, seed: int = 1) -> list[Sample]:
    """Samples whose TTFT and TPOT grow linearly with concurrency (base, per extra request), +-5% noise."""
    rng = random.Random(seed)
    out = []
    for c in levels:
        for _ in range(4):
            t = (ttft[0] + ttft[1] * c) * rng.uniform(0.95, 1.05)
            p = (tpot[0] + tpot[1] * c) * rng.uniform(0.95, 1.05)
            out.append(Sample(e2e=t + 255 * p, ttft=t, output_tokens=256, prompt_tokens=2048, concurrency=c))
    return out


# Seed 003 shapes: MTP decodes faster alone but, on long-context concurrent prefill, degrades faster.
MTP = cell(ttft=(0.20, 0.60), tpot=(0.0120, 0.0080), levels=range(1, 5))
PLAIN = cell(ttft=(0.25, 0.90), tpot=(0.0190, 0.0040), levels=range(1, 5), seed=2)


def test_prefers_the_backend_that_is_really_faster_for_the_objective() -> None:
    fast = cell(ttft=(0.3, 0.0), tpot=(0.018, 0.0), levels=range(1, 4))
    slow = cell(ttft=(0.5, 0.0), tpot=(0.0195, 0.0), levels=range(1, 4), seed=3)
    for objective in ("ttft", "e2e", "tokens_per_second"):
        preds = [predict(n, s, inflight=1, objective=objective) for n, s in (("slow", slow), ("fast", fast))]
        assert rank(preds) == ["fast", "slow"], objective


def test_at_high_concurrency_prefers_the_backend_that_degrades_less() -> None:
    def best(inflight: int) -> str:
        cells = (("mtp", MTP), ("plain", PLAIN))
        preds = [predict(n, s, inflight=inflight, objective="tokens_per_second") for n, s in cells]
        return rank(preds)[0]

    assert best(0) == "mtp"  # single user: MTP decodes faster
    assert best(7) == "plain"  # 8-way load: MTP's TPOT has grown past plain's


def test_tpot_prediction_follows_the_fit_at_the_load_the_request_joins() -> None:
    p = predict("mtp", MTP, inflight=5, objective="tokens_per_second")
    assert p.concurrency == 6
    assert p.tpot == pytest.approx(0.012 + 0.008 * 6, rel=0.05)
    # Tokens per second of the device's time: decode, plus the wait its load adds before the first token
    # (TTFT at c = 6 less TTFT at the lowest load measured, c = 1: ~0.6 s per extra request, as fitted).
    assert p.tpot is not None and p.ttft is not None
    wait = p.ttft - predict("mtp", MTP, inflight=0, objective="ttft").value
    assert wait > 2.5
    assert p.value == pytest.approx(256 / (256 * p.tpot + wait))
    assert p.higher_is_better
    assert "c 1..4" in p.why and "c=6" in p.why


def test_e2e_objective_is_ttft_plus_max_output_tokens_times_tpot() -> None:
    p = predict("plain", PLAIN, inflight=0, objective="e2e", max_output_tokens=1000)
    assert p.ttft is not None and p.tpot is not None
    assert p.value == pytest.approx(p.ttft + 1000 * p.tpot)
    assert not p.higher_is_better


def test_too_few_samples_gives_no_prediction_and_ranks_last() -> None:
    few = predict("new", MTP[:3], inflight=0, objective="ttft")
    assert few.value is None and few.samples == 3 and "< 5" in few.why
    known = predict("plain", PLAIN, inflight=0, objective="ttft")
    assert rank([few, known]) == ["plain", "new"]


def test_failed_requests_are_not_counted_as_measurements() -> None:
    failed = [Sample(e2e=0.1, ttft=0.05, output_tokens=3, prompt_tokens=10, concurrency=1, error=True)] * 10
    assert predict("b", failed, inflight=0, objective="ttft").value is None


def test_fresh_engine_queue_adds_a_ttft_penalty() -> None:
    base = predict("mtp", MTP, inflight=0, objective="ttft")
    hint = EngineHint(waiting=4, running=8, kv_usage=0.5, age_s=0.5, stale_after_s=3.0)
    queued = predict("mtp", MTP, inflight=0, objective="ttft", hint=hint)
    mean_e2e = sum(s.e2e for s in MTP) / len(MTP)
    assert queued.ttft == pytest.approx((base.ttft or 0) + 4 * mean_e2e / 8)
    assert "4 waiting" in queued.why


def test_full_kv_cache_counts_as_a_queue() -> None:
    hint = EngineHint(waiting=0, running=8, kv_usage=0.99, age_s=0.1, stale_after_s=3.0)
    base = predict("mtp", MTP, inflight=0, objective="ttft")
    full = predict("mtp", MTP, inflight=0, objective="ttft", hint=hint)
    assert (full.ttft or 0) > (base.ttft or 0)


def test_stale_engine_metrics_are_ignored_and_said_so() -> None:
    stale = EngineHint(waiting=50, running=1, kv_usage=1.0, age_s=3.5, stale_after_s=3.0)
    base = predict("mtp", MTP, inflight=0, objective="ttft")
    p = predict("mtp", MTP, inflight=0, objective="ttft", hint=stale)
    assert p.ttft == base.ttft
    assert "stale (3.5s > 3.0s): ignored" in p.why


def test_missing_engine_metrics_fall_back_to_gateway_measurements() -> None:
    p = predict("mtp", MTP, inflight=0, objective="ttft", hint=None)
    assert "no engine metrics" in p.why


def test_hint_from_scrape_carries_age_on_the_scraper_clock() -> None:
    metrics = EngineMetrics("vllm", running=3, waiting=2, kv_usage=0.4)
    result = ScrapeResult("b", taken_at=100.0, metrics=metrics, acceptance=None, acceptance_total=None)
    hint = hint_from_scrape(result, now=104.0, stale_after_s=3.0)
    assert hint is not None and hint.age_s == 4.0 and not hint.fresh
    assert hint_from_scrape(None, now=1.0, stale_after_s=3.0) is None


def test_model_cache_refits_only_when_the_cell_changes() -> None:
    rec = LiveRecorder(max_age_s=600.0)
    for i, s in enumerate(MTP):
        rec.record("mtp", "chat", s, now=1000.0 + i)
    cache = ModelCache()
    first = cache.get(rec, "mtp", "chat", now=1100.0)
    assert cache.get(rec, "mtp", "chat", now=1100.0) is first
    rec.record("mtp", "chat", MTP[0], now=1101.0)
    second = cache.get(rec, "mtp", "chat", now=1101.0)
    assert second is not first and second.samples == first.samples + 1
    expired = cache.get(rec, "mtp", "chat", now=1000.0 + 600.5)  # the oldest sample aged out
    assert expired.samples == second.samples - 1


def test_cached_model_predicts_like_the_plain_function() -> None:
    rec = LiveRecorder()
    for i, s in enumerate(PLAIN):
        rec.record("plain", "long", s, now=1000.0 + i)
    model = ModelCache().get(rec, "plain", "long", now=1100.0)
    direct = predict("plain", PLAIN, inflight=3, objective="e2e")
    assert predict_with_model("plain", model, inflight=3, objective="e2e") == direct


def test_a_request_beyond_the_engines_sequence_limit_waits_for_a_slot() -> None:
    model = build_model(MTP)
    unlimited = predict_with_model("e", model, inflight=5, objective="ttft")
    full = predict_with_model("e", model, inflight=5, objective="ttft", capacity=4)
    assert unlimited.ttft is not None and full.ttft is not None
    # c = 6 on an engine running 4 at once: 2 ahead of it in the queue, a slot every mean_e2e / 4.
    assert full.ttft == pytest.approx(unlimited.ttft + 2 * model.mean_e2e / 4)
    assert "over its 4 sequences" in full.why
    assert predict_with_model("e", model, inflight=3, objective="ttft", capacity=4).ttft == pytest.approx(
        predict_with_model("e", model, inflight=3, objective="ttft").ttft
    )


def test_a_prompt_longer_than_any_measured_adds_its_prefill_and_one_within_them_adds_nothing() -> None:
    # Measured on 2048-token prompts: an 8192-token one spends three more such prefills before its first
    # token, and the e2e ranking turns towards the engine that measured long prompts.
    short = build_model(cell(ttft=(0.30, 0.0), tpot=(0.018, 0.0), levels=range(1, 3)))
    long = build_model(
        [
            replace(s, prompt_tokens=8192)
            for s in cell(ttft=(1.0, 0.0), tpot=(0.018, 0.0), levels=range(1, 3), seed=2)
        ]
    )
    base = predict_with_model("short", short, inflight=0, objective="ttft", prompt_tokens=2048)
    longer = predict_with_model("short", short, inflight=0, objective="ttft", prompt_tokens=8192)
    assert base.ttft is not None and longer.ttft is not None
    assert longer.ttft == pytest.approx(base.ttft * 4, rel=0.1)
    assert "beyond the 2048 measured" in longer.why and "beyond" not in base.why
    assert predict_with_model("short", short, inflight=0, objective="ttft").ttft == base.ttft  # not told

    def best(prompt_tokens: int) -> str:
        preds = [
            predict_with_model(
                n, m, inflight=0, objective="e2e", max_output_tokens=256, prompt_tokens=prompt_tokens
            )
            for n, m in (("short", short), ("long", long))
        ]
        return rank(preds)[0]

    assert best(2048) == "short"  # the long-prompt engine's TTFT was measured on its own long prompts
    assert best(8192) == "long"


def test_a_prompt_beyond_a_cell_of_short_prompts_is_prefilled_at_the_engines_smaller_per_token_cost() -> None:
    # Decode probes' 19-token prompts: 0.25 s each, 13 ms a token. The engine's other profiles measured
    # 8k-token prompts in 1.6 s: 0.2 ms a token.
    probes = build_model([replace(s, prompt_tokens=19) for s in cell((0.25, 0.0), (0.018, 0.0), range(1, 3))])
    engine = build_model(
        [replace(s, prompt_tokens=8192) for s in cell((1.6, 0.0), (0.018, 0.0), range(1, 3), seed=2)]
    )
    alone = predict_with_model("e", probes, inflight=0, objective="ttft", prompt_tokens=2000)
    device = [DeviceLoad("e", 0, False, engine)]
    beside = predict_with_model("e", probes, inflight=0, objective="ttft", prompt_tokens=2000, device=device)
    assert alone.ttft is not None and beside.ttft is not None
    assert alone.ttft > 20.0  # the cell's own bound: 1981 tokens at 13 ms
    assert beside.ttft == pytest.approx(0.25 + 1981 * 1.6 / 8192, rel=0.1)
