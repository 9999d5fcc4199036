"""A real Prometheus scraping the gateway in front of the real pair: after some traffic, PromQL over its
HTTP API returns the gateway's request counter and TTFT histogram buckets per real backend."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_http import post
from gateway_harness import PLAIN, PLAIN_POOL, SPEC, SPEC_POOL, RunningGateway
from prometheus_process import Prometheus, binary, running_prometheus
from real_prompts import FREE_PROMPT, chat

pytestmark = pytest.mark.real

QUERY_TIMEOUT_S = 20.0


@pytest.fixture
def prometheus(pair_gateway: RunningGateway, tmp_path: Path) -> Iterator[Prometheus]:
    executable = binary()
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not installed (.ci/run installs it)")
        pytest.skip("prometheus is not installed (Debian: apt-get install prometheus)")
    with running_prometheus(executable, f"127.0.0.1:{pair_gateway.port}", tmp_path) as server:
        yield server


def _eventually(
    query: Callable[[], list[dict[str, Any]]], done: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """Scrapes are 1 s apart: poll the query until it shows the traffic."""
    deadline = time.monotonic() + QUERY_TIMEOUT_S
    result = query()
    while not done(result) and time.monotonic() < deadline:
        time.sleep(0.25)
        result = query()
    return result


def _by_backend(result: list[dict[str, Any]]) -> dict[str, float]:
    return {r["metric"].get("backend", ""): float(r["value"][1]) for r in result}


def test_prometheus_sees_requests_and_ttft_buckets_per_real_backend(
    pair_gateway: RunningGateway, prometheus: Prometheus
) -> None:
    sent = {PLAIN: 2, SPEC: 3}
    # One scrape before the traffic, so the counters' first samples are the "before" values.
    _eventually(
        lambda: prometheus.query('up{job="spark-gateway"}'), lambda r: bool(r) and r[0]["value"][1] == "1"
    )
    baseline = _by_backend(prometheus.query('sum by (backend) (gateway_requests_total{status="200"})'))
    for pool, backend in ((PLAIN_POOL, PLAIN), (SPEC_POOL, SPEC)):
        for _ in range(sent[backend]):
            response = post(
                pair_gateway.port, "/v1/chat/completions", chat(FREE_PROMPT, 4, model=pool, stream=True)
            )
            assert response.status == 200

    def moved(result: list[dict[str, Any]]) -> bool:
        counts = _by_backend(result)
        return all(counts.get(b, 0.0) - baseline.get(b, 0.0) >= n for b, n in sent.items())

    requests = _eventually(
        lambda: prometheus.query('sum by (backend) (gateway_requests_total{status="200"})'), moved
    )
    counts = _by_backend(requests)
    moved_by = {b: counts.get(b, 0.0) - baseline.get(b, 0.0) for b in sent}
    assert moved_by == {b: float(n) for b, n in sent.items()}

    buckets = prometheus.query('gateway_ttft_seconds_bucket{le="+Inf"}')
    per_backend = _by_backend(buckets)
    assert per_backend[PLAIN] >= sent[PLAIN] and per_backend[SPEC] >= sent[SPEC]
    p50 = _by_backend(
        prometheus.query("histogram_quantile(0.5, sum by (backend, le) (gateway_ttft_seconds_bucket))")
    )
    assert all(0 < p50[b] < 5 for b in sent), p50
