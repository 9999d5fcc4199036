"""Engine /metrics parsing per flavor, and speculative acceptance from counter deltas."""

from __future__ import annotations

import pytest

from gateway.backends.engine_metrics import (
    EngineMetrics,
    SpecCounters,
    acceptance_between,
    acceptance_from_timings,
    parse_metrics,
)

# vLLM 0.11 V1 with MTP (k=2), as /metrics prints it: HELP/TYPE lines, _created companions, histograms.
# Spec counters are the seed-003 totals after the run.
VLLM_MTP = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen3.6-mtp"} 14.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen3.6-mtp"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen3.6-mtp"} 0.4125
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="qwen3.6-mtp"} 1.2845e+06
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="qwen3.6-mtp"} 1.7451237e+09
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen3.6-mtp"} 101866.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="qwen3.6-mtp"} 310.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="qwen3.6-mtp"} 22.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="qwen3.6-mtp"} 0.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="qwen3.6-mtp"} 101.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="2.5",model_name="qwen3.6-mtp"} 300.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="qwen3.6-mtp"} 332.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="qwen3.6-mtp"} 332.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="qwen3.6-mtp"} 571.3
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="qwen3.6-mtp"} 12.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="qwen3.6-mtp"} 4211.0
vllm:iteration_tokens_total_count{engine="0",model_name="qwen3.6-mtp"} 4211.0
vllm:iteration_tokens_total_sum{engine="0",model_name="qwen3.6-mtp"} 90311.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="qwen3.6-mtp"} 41568.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="qwen3.6-mtp"} 83136.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="qwen3.6-mtp"} 60298.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen3.6-mtp",position="0"} 33909.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen3.6-mtp",position="1"} 26389.0
"""

# vLLM 0.9.1 without speculative decoding: the KV gauge still has its old name.
VLLM_OLD_NO_SPEC = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 1.0
vllm:num_requests_running{engine="1",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:gpu_cache_usage_perc{engine="1",model_name="m"} 0.7
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 100.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 50.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 10.0
vllm:generation_tokens_total{engine="1",model_name="m"} 5.0
"""

SGLANG_EAGLE = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 6.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 3.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.83
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 212.4
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 3.1
# HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding.
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.7
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{engine_type="unified",is_streaming="true",model_name="qwen"} 9000.0
sglang:prompt_tokens_total{engine_type="unified",is_streaming="false",model_name="qwen"} 1000.0
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="qwen"} 4000.0
sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="qwen"} 500.0
# HELP sglang:e2e_request_latency_seconds Histogram of End-to-end request latency in seconds
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_bucket{engine_type="unified",le="1.0",model_name="qwen"} 2.0
sglang:e2e_request_latency_seconds_bucket{engine_type="unified",le="+Inf",model_name="qwen"} 40.0
sglang:e2e_request_latency_seconds_count{engine_type="unified",model_name="qwen"} 40.0
sglang:e2e_request_latency_seconds_sum{engine_type="unified",model_name="qwen"} 211.0
"""

SGLANG_NO_SPEC = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="qwen",tp_rank="0"} 0.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="qwen",tp_rank="0"} 0.0
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="qwen",tp_rank="0"} 0.0
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{engine_type="unified",model_name="qwen",tp_rank="0"} 0.0
"""


def _llamacpp(draft_tokens: int, accepted: int, drafts: int, per_pos: tuple[int, ...]) -> str:
    # llama-server --metrics: no labels except `position`, one HELP/TYPE pair per metric.
    lines = []
    for name, kind, value in [
        ("prompt_tokens_total", "counter", 5120),
        ("prompt_tokens_cached_total", "counter", 880),
        ("prompt_seconds_total", "counter", 3.2),
        ("tokens_predicted_total", "counter", 2048),
        ("tokens_predicted_seconds_total", "counter", 40.9),
        ("n_decode_total", "counter", 1400),
        ("n_tokens_max", "counter", 6144),
        ("spec_decode_num_draft_tokens_total", "counter", draft_tokens),
        ("spec_decode_num_accepted_tokens_total", "counter", accepted),
        ("spec_decode_num_drafts_total", "counter", drafts),
        ("prompt_tokens_seconds", "gauge", 1600.0),
        ("predicted_tokens_seconds", "gauge", 50.1),
        ("requests_processing", "gauge", 2),
        ("requests_deferred", "gauge", 1),
        ("n_busy_slots_per_decode", "gauge", 1.5),
    ]:
        lines += [
            f"# HELP llamacpp:{name} {name}",
            f"# TYPE llamacpp:{name} {kind}",
            f"llamacpp:{name} {value}",
        ]
    name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
    lines += [f"# TYPE {name} counter"] + [f'{name}{{position="{i}"}} {v}' for i, v in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


def _counters(
    drafts: float, draft_tokens: float, accepted: float, per_pos: tuple[float, ...]
) -> EngineMetrics:
    return EngineMetrics("vllm", spec=SpecCounters(drafts, draft_tokens, accepted, per_pos))


def test_vllm_exposition_gives_load_kv_tokens_and_spec_counters() -> None:
    m = parse_metrics(VLLM_MTP, "vllm")
    assert (m.running, m.waiting, m.kv_usage) == (14.0, 2.0, 0.4125)
    assert (m.prompt_tokens_total, m.generation_tokens_total) == (1_284_500.0, 101_866.0)
    assert m.spec == SpecCounters(41568.0, 83136.0, 60298.0, (33909.0, 26389.0))


def test_vllm_acceptance_since_start_matches_seed_003_figures() -> None:
    acc = acceptance_between(None, parse_metrics(VLLM_MTP, "vllm"))
    assert acc is not None
    assert acc.acceptance_rate == pytest.approx(0.7253, abs=1e-4)
    assert acc.mean_acceptance_length == pytest.approx(2.4506, abs=1e-4)
    assert acc.per_position == pytest.approx((0.8157, 0.6348), abs=1e-4)


def test_vllm_old_kv_name_and_data_parallel_engines_are_combined() -> None:
    m = parse_metrics(VLLM_OLD_NO_SPEC, "vllm")
    assert (m.running, m.waiting, m.prompt_tokens_total, m.generation_tokens_total) == (4.0, 1.0, 150.0, 15.0)
    assert m.kv_usage == 0.7  # the fullest engine is the one that queues
    assert m.spec is None
    assert acceptance_between(None, m) is None


def test_sglang_exposition_reads_queue_kv_and_spec_gauges() -> None:
    m = parse_metrics(SGLANG_EAGLE, "sglang")
    assert (m.running, m.waiting, m.kv_usage) == (6.0, 3.0, 0.83)
    assert (m.prompt_tokens_total, m.generation_tokens_total) == (10000.0, 4500.0)
    acc = acceptance_between(None, m)
    assert acc is not None and acc.source == "gauges"
    assert (acc.mean_acceptance_length, acc.acceptance_rate) == (3.1, 0.7)


def test_sglang_zero_accept_length_means_no_speculative_data() -> None:
    assert acceptance_between(None, parse_metrics(SGLANG_NO_SPEC, "sglang")) is None


def test_llamacpp_exposition_reads_slots_tokens_and_spec_counters() -> None:
    m = parse_metrics(_llamacpp(800, 560, 200, (180, 140, 120, 120)), "llamacpp")
    assert (m.running, m.waiting, m.kv_usage) == (2.0, 1.0, None)  # KV ratio was removed upstream
    assert m.prompt_tokens_total == 6000.0  # uncached + cached prompt tokens
    assert m.generation_tokens_total == 2048.0
    assert m.spec == SpecCounters(200.0, 800.0, 560.0, (180.0, 140.0, 120.0, 120.0))


def test_llamacpp_before_first_speculative_request_has_no_per_position_series() -> None:
    m = parse_metrics(_llamacpp(0, 0, 0, ()), "llamacpp")
    acc = acceptance_between(None, m)
    assert acc is not None
    assert (acc.acceptance_rate, acc.mean_acceptance_length, acc.per_position) == (None, None, ())


def test_acceptance_is_computed_from_deltas_between_scrapes() -> None:
    before = _counters(1000, 2000, 1400, (800, 600))
    after = _counters(1100, 2200, 1500, (860, 640))
    acc = acceptance_between(before, after)
    assert acc is not None and not acc.counter_reset
    assert acc.acceptance_rate == pytest.approx(100 / 200)
    assert acc.mean_acceptance_length == pytest.approx(1 + 100 / 100)
    assert acc.per_position == pytest.approx((0.6, 0.4))


def test_counter_reset_between_scrapes_uses_new_counts_never_negative() -> None:
    before = _counters(41568, 83136, 60298, (33909, 26389))
    after_restart = _counters(50, 100, 70, (40, 30))
    acc = acceptance_between(before, after_restart)
    assert acc is not None and acc.counter_reset
    assert (acc.drafts, acc.draft_tokens, acc.accepted_tokens) == (50, 100, 70)
    assert acc.acceptance_rate == pytest.approx(0.7)
    assert acc.mean_acceptance_length == pytest.approx(2.4)
    assert acc.per_position == pytest.approx((0.8, 0.6))


def test_idle_interval_has_no_acceptance_rate() -> None:
    same = _counters(10, 20, 15, (8, 7))
    acc = acceptance_between(same, same)
    assert acc is not None
    assert (acc.acceptance_rate, acc.mean_acceptance_length) == (None, None)


def test_llamacpp_timings_give_per_response_acceptance() -> None:
    acc = acceptance_from_timings({"predicted_n": 256, "draft_n": 120, "draft_n_accepted": 90})
    assert acc is not None and acc.source == "timings"
    assert acc.acceptance_rate == pytest.approx(0.75)
    assert acc.mean_acceptance_length is None


@pytest.mark.parametrize(
    "timings",
    [{"predicted_n": 256}, {"draft_n": 0, "draft_n_accepted": 0}, {"draft_n": "12", "draft_n_accepted": 3}],
)
def test_timings_without_drafting_give_no_acceptance(timings: dict[str, object]) -> None:
    assert acceptance_from_timings(timings) is None


def test_malformed_exposition_and_unknown_flavor_raise_value_error() -> None:
    with pytest.raises(ValueError):
        parse_metrics('vllm:num_requests_running{engine="0" 1\n', "vllm")
    with pytest.raises(ValueError):
        parse_metrics(VLLM_MTP, "tgi")  # type: ignore[arg-type]


def test_exposition_of_another_flavor_is_an_error_not_empty_metrics() -> None:
    with pytest.raises(ValueError, match="no engine metrics"):
        parse_metrics(SGLANG_EAGLE, "vllm")
