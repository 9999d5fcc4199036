"""The engine /metrics scraper: latest result per backend, staleness, and isolation from dead backends."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

import pytest

from gateway.backends.scraper import MetricsScraper, ScrapeTarget


def _vllm_text(
    waiting: int, drafts: int, draft_tokens: int, accepted: int, running: int = 4, kv: float = 0.5
) -> str:
    return (
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}\n'
        "# TYPE vllm:spec_decode_num_drafts_total counter\n"
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}\n'
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}\n'
    )


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class ScriptedFetch:
    """Serves queued bodies per URL (200); a URL listed in `hang` never answers, one in `fail` raises, one
    in `status` answers that status instead."""

    def __init__(self) -> None:
        self.bodies: dict[str, list[str]] = {}
        self.hang: set[str] = set()
        self.fail: set[str] = set()
        self.status: dict[str, int] = {}
        self.calls: list[str] = []
        self.timeouts: list[float] = []

    async def __call__(self, url: str, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
        self.calls.append(url)
        self.timeouts.append(timeout_s)
        if url in self.hang:
            await asyncio.sleep(3600)
        if url in self.fail:
            raise ConnectionRefusedError("connection refused")
        if url in self.status:
            return self.status[url], b"busy"
        queue = self.bodies[url]
        return 200, (queue.pop(0) if len(queue) > 1 else queue[0]).encode()


A = ScrapeTarget("mtp", "http://a/metrics", "vllm")
B = ScrapeTarget("plain", "http://b/metrics", "vllm")


async def test_latest_holds_parsed_metrics_and_interval_acceptance() -> None:
    fetch, clock = ScriptedFetch(), FakeClock()
    fetch.bodies[A.url] = [_vllm_text(0, 100, 200, 140), _vllm_text(3, 150, 300, 200)]
    scraper = MetricsScraper([A], fetch, interval_s=1.0, clock=clock)
    await scraper.scrape_once()
    clock.t += 1.0
    await scraper.scrape_once()
    result = scraper.latest("mtp")
    assert result is not None and result.taken_at == 1001.0
    assert result.metrics.waiting == 3.0
    assert result.acceptance is not None and result.acceptance.acceptance_rate == pytest.approx(60 / 100)
    total = result.acceptance_total
    assert total is not None and total.acceptance_rate == pytest.approx(200 / 300)


async def test_the_router_sees_a_queue_only_once_it_shows_in_two_reports_running() -> None:
    fetch, clock = ScriptedFetch(), FakeClock()
    # A request caught between its arrival and the engine's next step, then a queue that stays.
    fetch.bodies[A.url] = [_vllm_text(0, 1, 2, 1), _vllm_text(1, 1, 2, 1), _vllm_text(0, 1, 2, 1)]
    fetch.bodies[A.url] += [_vllm_text(3, 1, 2, 1), _vllm_text(5, 1, 2, 1)]
    scraper = MetricsScraper([A], fetch, interval_s=1.0, clock=clock)
    seen: list[tuple[float | None, float | None]] = []
    for _ in range(5):
        await scraper.scrape_once()
        hint, latest = scraper.hint("mtp"), scraper.latest("mtp")
        assert hint is not None and latest is not None
        seen.append((latest.metrics.waiting, hint.waiting))
        clock.t += 1.0
    assert seen == [(0.0, 0.0), (1.0, 0.0), (0.0, 0.0), (3.0, 0.0), (5.0, 3.0)]


async def test_waiting_on_an_engine_that_has_run_more_at_once_is_no_queue_unless_its_cache_is_full() -> None:
    """Under steady arrivals every report may catch another request waiting for the engine's next step;
    an engine that has run more requests at once, with cache to spare, admits it then."""
    fetch, clock = ScriptedFetch(), FakeClock()
    reports = [(0, 16, 0.2), (1, 15, 0.2), (1, 15, 0.2), (2, 16, 0.2), (2, 16, 0.2), (3, 12, 0.95)]
    fetch.bodies[A.url] = [_vllm_text(w, 1, 2, 1, running=r, kv=kv) for w, r, kv in reports]
    fetch.bodies[A.url].append(_vllm_text(3, 1, 2, 1, running=12, kv=0.95))
    scraper = MetricsScraper([A], fetch, interval_s=1.0, clock=clock)
    queues: list[float | None] = []
    for _ in range(7):
        await scraper.scrape_once()
        hint = scraper.hint("mtp")
        assert hint is not None
        queues.append(hint.waiting)
        clock.t += 1.0
    # 15 running after 16: room, whatever waits; 16 again (its most) with 2 waiting twice: a queue; 12
    # running with the cache 95 % full: a queue too.
    assert queues == [0.0, 0.0, 0.0, 1.0, 2.0, 2.0, 3.0]


async def test_what_an_engine_ran_with_a_queue_behind_is_its_running_limit_and_does_not_go_stale() -> None:
    fetch, clock = ScriptedFetch(), FakeClock()
    reports = [(0, 8, 0.2), (3, 16, 0.2), (5, 16, 0.2), (0, 10, 0.2), (4, 12, 0.97), (4, 12, 0.97)]
    fetch.bodies[A.url] = [_vllm_text(w, 1, 2, 1, running=r, kv=kv) for w, r, kv in reports]
    scraper = MetricsScraper([A], fetch, interval_s=1.0, clock=clock)
    limits: list[int | None] = []
    for _ in range(6):
        await scraper.scrape_once()
        limits.append(scraper.running_limit("mtp"))
        clock.t += 1.0
    # Full at 16 with a queue in two reports running; then, twice, at 12 for want of cache: the latest
    # queue's is the limit now.
    assert limits == [None, None, 16, 16, 16, 12]
    clock.t += 100.0  # no scrape for long: the queue's length is stale, the limit is not
    assert scraper.running_limit("mtp") == 12
    scraper.set_targets([ScrapeTarget("mtp", "http://other/metrics", "vllm")])
    assert scraper.running_limit("mtp") is None  # another engine: another limit


async def test_data_goes_stale_after_three_intervals_without_a_good_scrape() -> None:
    fetch, clock = ScriptedFetch(), FakeClock()
    fetch.bodies[A.url] = [_vllm_text(0, 1, 2, 1)]
    scraper = MetricsScraper([A], fetch, interval_s=1.0, stale_after_intervals=3, clock=clock)
    assert not scraper.is_fresh("mtp")
    await scraper.scrape_once()
    fetch.fail.add(A.url)
    clock.t += 3.0
    await scraper.scrape_once()
    assert scraper.is_fresh("mtp")
    assert scraper.last_error("mtp") == "ConnectionRefusedError: connection refused"
    clock.t += 0.5
    assert not scraper.is_fresh("mtp")
    assert scraper.latest("mtp") is not None  # kept, but the router must treat it as stale


async def test_dead_backend_does_not_delay_the_others() -> None:
    fetch = ScriptedFetch()
    fetch.bodies[B.url] = [_vllm_text(1, 1, 2, 1)]
    fetch.hang.add(A.url)
    scraper = MetricsScraper([A, B], fetch, interval_s=0.2, timeout_s=0.2)
    started = time.monotonic()
    round_ = asyncio.create_task(scraper.scrape_once())
    await asyncio.sleep(0.05)
    assert scraper.latest("plain") is not None  # landed while the dead backend still hangs
    await asyncio.wait_for(round_, timeout=2.0)
    assert time.monotonic() - started < 1.0
    assert scraper.latest("mtp") is None
    assert scraper.last_error("mtp") == "timed out after 0.20s"


async def test_background_task_polls_every_interval_and_stops_cleanly() -> None:
    fetch = ScriptedFetch()
    fetch.bodies[B.url] = [_vllm_text(0, 1, 2, 1)]
    fetch.hang.add(A.url)
    scraper = MetricsScraper([A, B], fetch, interval_s=0.05)
    scraper.start()
    await asyncio.sleep(0.33)
    await asyncio.wait_for(scraper.stop(), timeout=1.0)
    polls_of_b = fetch.calls.count(B.url)
    assert 4 <= polls_of_b <= 8  # about one per interval despite A never answering
    await asyncio.sleep(0.1)
    assert fetch.calls.count(B.url) == polls_of_b


async def test_unparsable_body_is_an_error_not_a_crash() -> None:
    fetch = ScriptedFetch()
    fetch.bodies[A.url] = ['{"error":{"code":501,"message":"not supported"}']
    scraper = MetricsScraper([A], fetch, interval_s=1.0)
    await scraper.scrape_once()
    assert scraper.latest("mtp") is None
    assert scraper.last_error("mtp") is not None


async def test_removed_backend_data_is_dropped() -> None:
    fetch = ScriptedFetch()
    fetch.bodies[A.url] = [_vllm_text(0, 1, 2, 1)]
    scraper = MetricsScraper([A], fetch, interval_s=1.0)
    await scraper.scrape_once()
    scraper.set_targets([B])
    assert scraper.latest("mtp") is None


async def test_an_answer_other_than_200_is_a_failed_scrape_and_the_fetch_gets_the_timeout() -> None:
    fetch = ScriptedFetch()
    fetch.bodies[A.url] = [_vllm_text(0, 1, 2, 1)]
    scraper = MetricsScraper([A], fetch, interval_s=1.0, timeout_s=0.5)
    await scraper.scrape_once()
    assert scraper.latest("mtp") is not None and fetch.timeouts == [0.5]
    fetch.status[A.url] = 503
    await scraper.scrape_once()
    assert scraper.last_error("mtp") == "HTTP 503"
    result = scraper.latest("mtp")
    assert result is not None and result.metrics.waiting == 0.0  # the last good scrape is kept


async def test_failures_are_logged_once_per_change_and_the_recovery_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.backends.scraper")
    fetch = ScriptedFetch()
    fetch.bodies[A.url] = [_vllm_text(0, 1, 2, 1)]
    secret = ScrapeTarget("mtp", "http://gw:pw-SECRET@a/metrics", "vllm")
    fetch.bodies[secret.url] = fetch.bodies[A.url]
    scraper = MetricsScraper([secret], fetch, interval_s=1.0)
    fetch.status[secret.url] = 503
    for _ in range(5):
        await scraper.scrape_once()
    del fetch.status[secret.url]
    await scraper.scrape_once()
    await scraper.scrape_once()
    logged = [r.getMessage() for r in caplog.records]
    assert logged == [
        "metrics scrape of mtp (http://a/metrics) failed: HTTP 503",
        "metrics scrape of mtp (http://a/metrics) works again (it failed: HTTP 503)",
    ]
    assert scraper.last_error("mtp") is None


async def test_a_round_that_raises_keeps_the_loop_alive_and_says_so_per_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fetch = ScriptedFetch()
    fetch.bodies[A.url] = [_vllm_text(0, 1, 2, 1)]
    scraper = MetricsScraper([A], fetch, interval_s=0.01)
    rounds = 0
    scrape_once = scraper.scrape_once

    async def broken() -> None:
        nonlocal rounds
        rounds += 1
        if rounds <= 3:
            raise RuntimeError("a bug in a round")
        await scrape_once()

    monkeypatch.setattr(scraper, "scrape_once", broken)
    scraper.start()
    try:
        async with asyncio.timeout(3):
            while scraper.last_error("mtp") is None:
                await asyncio.sleep(0.001)
            assert scraper.last_error("mtp") == "scrape round failed: RuntimeError: a bug in a round"
            while scraper.latest("mtp") is None:  # the loop went on: the next good round lands
                await asyncio.sleep(0.005)
    finally:
        await scraper.stop()
    assert rounds > 3 and scraper.last_error("mtp") is None
