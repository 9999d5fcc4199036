"""Rolling windows per (backend, profile): bounds, newest-wins, and the latency formulas."""

from __future__ import annotations

import json

import pytest

from gateway.records import Sample
from gateway.stats.live import LiveRecorder, percentile


def sample(
    ttft: float | None = 0.2, e2e: float = 2.2, out: int = 101, concurrency: int = 1, error: bool = False
) -> Sample:
    return Sample(
        e2e=e2e, ttft=ttft, output_tokens=out, prompt_tokens=512, concurrency=concurrency, error=error
    )


def test_tpot_is_decode_time_per_token_after_the_first() -> None:
    s = sample(ttft=4.0, e2e=6.55, out=256)  # a long prefill must not leak into per-token speed
    assert s.tpot == pytest.approx(2.55 / 255)
    assert s.tpot != pytest.approx(6.55 / 256)
    assert s.decode_tps == pytest.approx(255 / 2.55)


@pytest.mark.parametrize(
    "s",
    [sample(out=1, e2e=0.3), sample(ttft=None), sample(error=True), sample(ttft=1.0, e2e=1.0)],
)
def test_no_tpot_without_a_decode_phase(s: Sample) -> None:
    assert s.tpot is None and s.decode_tps is None


def test_summary_reports_ttft_percentiles_and_decode_only_tpot() -> None:
    rec = LiveRecorder()
    for i in range(20):
        rec.record("mtp", "chat", sample(ttft=0.1 * (i + 1), e2e=0.1 * (i + 1) + 1.0, out=101), now=100.0 + i)
    s = rec.summary("mtp", "chat", now=120.0)
    assert s.count == 20 and s.errors == 0
    assert s.ttft_p50 == pytest.approx(1.05)
    assert s.ttft_p95 == pytest.approx(1.905)
    assert s.tpot_mean == pytest.approx(0.01)  # 1.0 s of decode over 100 tokens, whatever the TTFT
    assert s.decode_tps_mean == pytest.approx(100.0)
    assert s.newest_age_s == pytest.approx(1.0)


def test_error_rate_counts_failures_and_latency_excludes_them() -> None:
    rec = LiveRecorder()
    rec.record("b", "p", sample(ttft=0.2), now=1.0)
    rec.record("b", "p", sample(ttft=9.0, error=True), now=2.0)
    s = rec.summary("b", "p", now=3.0)
    assert (s.count, s.errors, s.error_rate) == (2, 1, 0.5)
    assert s.ttft_p95 == pytest.approx(0.2)


def test_window_keeps_only_the_newest_samples_per_cell() -> None:
    rec = LiveRecorder(max_samples=8)
    for i in range(30):
        rec.record("b", "p", sample(ttft=float(i)), now=float(i))
    kept = [s.ttft for s in rec.samples("b", "p", now=30.0)]
    assert kept == [float(i) for i in range(22, 30)]


def test_samples_older_than_max_age_expire() -> None:
    rec = LiveRecorder(max_age_s=600.0)
    rec.record("b", "p", sample(ttft=1.0), now=0.0)
    rec.record("b", "p", sample(ttft=2.0), now=500.0)
    assert len(rec.samples("b", "p", now=599.0)) == 2
    assert [s.ttft for s in rec.samples("b", "p", now=700.0)] == [2.0]
    assert rec.summary("b", "p", now=1200.0).count == 0


def test_number_of_cells_is_bounded_dropping_the_coldest() -> None:
    rec = LiveRecorder(max_cells=4)
    for i in range(10):
        rec.record(f"b{i}", "p", sample(), now=float(i))
        rec.record("hot", "p", sample(), now=float(i))
    assert len(rec) == 4
    assert rec.summary("hot", "p", now=10.0).count == 10
    assert rec.summary("b0", "p", now=10.0).count == 0


def test_memory_stays_flat_under_sustained_traffic() -> None:
    rec = LiveRecorder(max_samples=16, max_cells=8, max_age_s=60.0)
    for i in range(20_000):
        rec.record(f"b{i % 11}", f"p{i % 3}", sample(), now=i * 0.01)
    assert len(rec) == 8
    assert all(len(entries) <= 16 for _, _, entries in rec.cells(now=200.0))


def test_injected_clock_is_used_when_now_is_omitted() -> None:
    t = [50.0]
    rec = LiveRecorder(max_age_s=10.0, clock=lambda: t[0])
    rec.record("b", "p", sample())
    t[0] = 70.0
    assert rec.summary("b", "p").count == 0


def test_to_dict_is_json_serializable_and_nested_by_backend_then_profile() -> None:
    rec = LiveRecorder()
    rec.record("mtp", "chat", sample(), now=1.0)
    rec.record("plain", "long", sample(), now=1.0)
    view = json.loads(json.dumps(rec.to_dict(now=2.0)))
    assert view["window"] == {"max_age_s": 600.0, "max_samples": 256, "max_cells": 512}
    assert view["backends"]["mtp"]["chat"]["count"] == 1
    assert view["backends"]["plain"]["long"]["tpot_mean"] == pytest.approx(0.02)


def test_percentile_interpolates() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0], 95) == pytest.approx(1.95)


def test_invalid_bounds_are_rejected() -> None:
    with pytest.raises(ValueError):
        LiveRecorder(max_samples=0)


def test_version_changes_when_a_cell_gains_or_loses_samples() -> None:
    rec = LiveRecorder(max_age_s=10.0)
    assert rec.version("b", "p") == 0
    rec.record("b", "p", sample(), now=0.0)
    v1 = rec.version("b", "p", now=1.0)
    assert rec.version("b", "p", now=2.0) == v1
    rec.record("b", "p", sample(), now=5.0)
    v2 = rec.version("b", "p", now=5.0)
    assert v2 != v1
    assert rec.version("b", "p", now=10.5) not in (v1, v2)  # the first sample expired
