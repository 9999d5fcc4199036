"""A benchmark client's TTFT, ITL and output tok/s through the gateway agree with what the gateway itself
recorded for the same run (within 5%). The client is the project's streaming bench client; the heavier
external client (llama-benchy) is run by tests/real/external_bench.py, see docs/real-engines.md."""

from __future__ import annotations

import asyncio
import statistics

import aiohttp
import pytest
from client_vs_gateway import Figures, gateway_figures
from gateway_harness import PLAIN, PLAIN_POOL, RunningGateway, metric_samples

from gateway.bench.client import RequestResult, StreamingClient

pytestmark = pytest.mark.real

REQUESTS = 4
MAX_TOKENS = 32
TOLERANCE = 0.05
# Long enough that the prefill (not the few hundred microseconds of loopback between client and gateway)
# dominates TTFT; the request number leads, so the engine's prompt cache cannot skip the prefill.
PROMPT = " ".join(["The history of the lighthouse begins with the fires kept on hills by the sea."] * 12)


async def _run(url: str) -> list[RequestResult]:
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        client = StreamingClient(session, url, PLAIN_POOL)
        return [await client.complete(f"{i}. {PROMPT}", MAX_TOKENS) for i in range(REQUESTS)]


def _client_figures(results: list[RequestResult]) -> Figures:
    ok = [r for r in results if r.ok]
    assert len(ok) == REQUESTS, [r.error for r in results]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    itls = [gap for r in ok for gap in r.itls_s]
    tokens = sum(r.output_tokens for r in ok)
    return Figures(
        len(ok), statistics.fmean(ttfts), statistics.fmean(itls), tokens, tokens / sum(r.e2e_s for r in ok)
    )


def test_client_and_gateway_agree_on_ttft_itl_and_tok_s(pair_gateway: RunningGateway) -> None:
    before = metric_samples(pair_gateway.port)
    client = _client_figures(asyncio.run(_run(pair_gateway.url)))
    gateway = gateway_figures(before, metric_samples(pair_gateway.port), PLAIN)
    assert (gateway.requests, gateway.output_tokens) == (client.requests, client.output_tokens)
    deviation = client.deviation(gateway)
    assert all(abs(d) <= TOLERANCE for d in deviation.values()), (client, gateway, deviation)
