"""`spark-gateway bench scenarios`: metric definitions, the streaming client, and a run against a twin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.bench.client import RequestResult
from gateway.bench.scenarios import summarize
from gateway.cli import main

JSON_KEYS = {
    "target",
    "scenario",
    "output_tok_s",
    "mean_ttft_ms",
    "mean_tpot_ms",
    "mean_itl_ms",
    "p99_itl_ms",
    "requests",
    "failures",
}


def burst_request() -> RequestResult:
    # First chunk at 100 ms; then 3-token bursts every 60 ms: 7 tokens in 3 chunks.
    return RequestResult(ok=True, output_tokens=7, e2e_s=0.22, chunk_times_s=(0.10, 0.16, 0.22))


def test_tpot_excludes_ttft_and_spreads_over_tokens_after_the_first() -> None:
    assert burst_request().tpot_s == pytest.approx((0.22 - 0.10) / 6)


def test_itl_counts_gaps_between_chunks_so_bursts_show() -> None:
    result = summarize("t", "A", [burst_request()], duration_s=1.0)
    assert result.mean_itl_ms == pytest.approx(60.0)
    assert result.mean_tpot_ms == pytest.approx(20.0)
    assert result.mean_ttft_ms == pytest.approx(100.0)


def test_failures_are_counted_and_left_out_of_the_timings() -> None:
    failed = RequestResult(ok=False, e2e_s=5.0, error="HTTP 500")
    result = summarize("t", "A", [burst_request(), failed], duration_s=1.0)
    assert (result.requests, result.failures) == (2, 1)
    assert result.output_tok_s == pytest.approx(7.0)
    assert result.mean_ttft_ms == pytest.approx(100.0)


def test_scaled_result_converts_wall_time_to_simulated_time() -> None:
    scaled = burst_request().scaled(50)
    assert scaled.ttft_s == pytest.approx(5.0)
    assert scaled.e2e_s == pytest.approx(11.0)


def test_p99_itl_interpolates_between_the_largest_gaps() -> None:
    gaps = tuple(float(i) for i in range(101))  # chunk times 0, 1, 3, 6, ... give gaps 1..100
    times = tuple(sum(gaps[1 : i + 1]) for i in range(101))
    result = summarize(
        "t",
        "A",
        [RequestResult(ok=True, output_tokens=101, e2e_s=times[-1], chunk_times_s=times)],
        duration_s=1.0,
    )
    assert result.p99_itl_ms == pytest.approx(99.01 * 1000)


FLEET = """
name: bench-test
devices: {one: {}, two: {}}
engines:
  - {name: plain, served_model_name: m, device: one, context_length: 8192}
  - name: mtp
    served_model_name: m
    device: two
    context_length: 8192
    perf: {speculative: {method: mtp, k: 2}}
"""


def test_fleet_run_prints_the_json_contract_for_every_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET)
    code = main(
        [
            "bench",
            "scenarios",
            "--fleet",
            str(fleet),
            "--json",
            "--requests",
            "2",
            "--scenario",
            "D",
            # Tenfold rather than faster: at 100x a busy machine's own scheduling delays, scaled
            # up a hundredfold, swamp the simulated engine's timings.
            "--time-scale",
            "10",
        ]
    )
    assert code == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert [(r["target"], r["scenario"]) for r in results] == [("plain", "D"), ("mtp", "D")]
    for r in results:
        assert set(r) == JSON_KEYS
        assert r["requests"] == 2 and r["failures"] == 0
        # 2 concurrent x 2048 in / 256 out on one Spark: tens of tok/s in simulated time, as in seed 003.
        assert 40 < r["output_tok_s"] < 120
    plain, mtp = results
    assert plain["mean_itl_ms"] == pytest.approx(plain["mean_tpot_ms"], rel=0.1)
    assert mtp["mean_itl_ms"] > 1.5 * mtp["mean_tpot_ms"]  # speculative bursts


def test_url_mode_requires_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "scenarios", "--url", "http://127.0.0.1:9"])
    assert "--model" in capsys.readouterr().err
