"""The gateway's engine-metrics scraper and llama.cpp parser against the real /metrics of both instances,
after traffic sent through the gateway. The scraper is driven directly here (one MetricsScraper over both
backends' /metrics URLs), so these tests pin the parsing of the real exposition, not the app's wiring."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Mapping

import pytest
from engine_fleet import EnginePair
from engine_http import post
from gateway_harness import PLAIN, PLAIN_POOL, SPEC, SPEC_POOL, RunningGateway
from real_prompts import REPETITIVE_PROMPTS, chat

from gateway.backends.scraper import MetricsScraper, ScrapeResult, ScrapeTarget

pytestmark = pytest.mark.real


def _fetch_blocking(url: str, timeout_s: float) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return int(response.status), bytes(response.read())


async def _fetch(url: str, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
    return await asyncio.to_thread(_fetch_blocking, url, timeout_s)


def _scrape(engine_pair: EnginePair) -> dict[str, ScrapeResult]:
    targets = [
        ScrapeTarget(PLAIN, engine_pair.plain.base_url + "/metrics", "llamacpp"),
        ScrapeTarget(SPEC, engine_pair.speculative.base_url + "/metrics", "llamacpp"),
    ]
    scraper = MetricsScraper(targets, _fetch, interval_s=5.0)
    asyncio.run(scraper.scrape_once())
    results = {name: scraper.latest(name) for name in (PLAIN, SPEC)}
    assert all(r is not None for r in results.values()), {n: scraper.last_error(n) for n in (PLAIN, SPEC)}
    return {name: r for name, r in results.items() if r is not None}


def _through_gateway(gateway: RunningGateway, pool: str, prompt: str) -> dict[str, object]:
    response = post(gateway.port, "/v1/chat/completions", chat(prompt, model=pool))
    assert response.status == 200, response.text
    body: dict[str, object] = response.json()
    return body


def test_scraper_reads_the_real_speculative_counters(
    pair_gateway: RunningGateway, engine_pair: EnginePair
) -> None:
    before = _scrape(engine_pair)
    timings = _through_gateway(pair_gateway, SPEC_POOL, REPETITIVE_PROMPTS[0])["timings"]
    after = _scrape(engine_pair)
    assert isinstance(timings, dict) and timings["draft_n"] > 0
    spec_before, spec_after = before[SPEC].metrics.spec, after[SPEC].metrics.spec
    assert spec_before is not None and spec_after is not None
    assert spec_after.draft_tokens - spec_before.draft_tokens == timings["draft_n"]
    assert spec_after.accepted_tokens - spec_before.accepted_tokens == timings["draft_n_accepted"]
    total = after[SPEC].acceptance_total
    assert total is not None and total.acceptance_rate is not None and 0 < total.acceptance_rate <= 1
    assert total.mean_acceptance_length is not None and total.mean_acceptance_length > 1
    assert total.per_position and 0 < total.per_position[0] <= 1


def test_scraper_reads_zero_speculation_and_token_counts_on_the_plain_instance(
    pair_gateway: RunningGateway, engine_pair: EnginePair
) -> None:
    before = _scrape(engine_pair)[PLAIN].metrics
    body = _through_gateway(pair_gateway, PLAIN_POOL, REPETITIVE_PROMPTS[1])
    after = _scrape(engine_pair)[PLAIN].metrics
    usage = body["usage"]
    assert isinstance(usage, dict)
    assert after.generation_tokens_total is not None and before.generation_tokens_total is not None
    assert after.generation_tokens_total - before.generation_tokens_total == usage["completion_tokens"]
    assert after.prompt_tokens_total is not None and before.prompt_tokens_total is not None
    # prompt_tokens_total counts cached tokens too (the parser adds llamacpp:prompt_tokens_cached_total).
    assert after.prompt_tokens_total - before.prompt_tokens_total == usage["prompt_tokens"]
    assert (after.running, after.waiting) == (0, 0)
    assert after.spec is not None and after.spec.draft_tokens == after.spec.accepted_tokens == 0
