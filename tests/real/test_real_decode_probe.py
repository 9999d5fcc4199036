"""Decode probes against real engines: the body a probe sends (ignore_eos, include_usage, a short
max_tokens) is one real llama-server and real vLLM accept, decode in full and time like any stream."""

from __future__ import annotations

import asyncio

import pytest
from engine_fleet import EnginePair
from vllm_process import SERVED_NAME, VllmPair

from gateway.proxy.decode_probe import PROBE_PROFILE, PROBE_TOKENS, DecodeProbes, ProbeTarget
from gateway.proxy.upstream import AiohttpTransport
from gateway.records import Sample
from gateway.settings import Timeouts

pytestmark = pytest.mark.real

PROBE_TIMEOUT_S = 120.0


def probe(base_url: str) -> list[tuple[str, str, Sample]]:
    """One probe of the engine at `base_url`, through the gateway's production transport."""
    recorded: list[tuple[str, str, Sample]] = []

    async def run() -> None:
        transport = AiohttpTransport(Timeouts())
        target = ProbeTarget(base_url, SERVED_NAME, {"content-type": "application/json"})
        probes = DecodeProbes(
            transport,
            {"engine": target},
            lambda backend, profile, sample: recorded.append((backend, profile, sample)),
            inflight=lambda backend: 0,
            shared_seconds=lambda backend: 0.0,
        )
        try:
            probes.send("engine")
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                while not recorded:
                    await asyncio.sleep(0.05)
        finally:
            await probes.stop()
            await transport.aclose()

    asyncio.run(run())
    return recorded


def assert_timed(recorded: list[tuple[str, str, Sample]]) -> None:
    [(backend, profile, sample)] = recorded
    assert (backend, profile) == ("engine", PROBE_PROFILE)
    # ignore_eos: every token asked for is decoded, whatever the model would have said
    assert sample.output_tokens == PROBE_TOKENS and sample.prompt_tokens > 5
    assert sample.ttft is not None and 0 < sample.ttft < sample.e2e
    assert sample.tpot is not None and sample.tpot > 0


def test_a_decode_probe_times_a_real_llama_server(engine_pair: EnginePair) -> None:
    assert_timed(probe(engine_pair.plain.base_url))


def test_a_decode_probe_times_a_real_vllm_server(vllm_pair: VllmPair) -> None:
    assert_timed(probe(vllm_pair.plain.base_url))
