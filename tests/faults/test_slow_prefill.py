"""Slow engines are not stalled ones: twin engines whose prefill is ten times slower than a Spark's (a
busy device, a bigger model, a CPU), in real time, behind a running gateway with its production stall
settings.

What must hold: a long prompt whose first token comes 20-40 s after it was sent is served by the engine
it was routed to, streamed or whole, with no stall declared and nothing moved; with both engines of a
pool busy on long prefills (their streams under way silent meanwhile), every request is served without
an error, and the gateway's log and metrics show the suspicions it had cleared by the engines' own
progress. Every wait is bounded; the fleet and the gateway always stop."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from fault_rig import MODEL, Answer, Rig, serve_gateway

from gateway.backends.registry import Status
from gateway.settings import Settings
from gateway.sim.fleet import EngineSpec, FleetSpec
from gateway.sim.perf import DeviceSpec, PerfSpec
from gateway.sim.runner import TwinFleet

POLICY = """
version: 1
routing: static
profiles:
  - name: default
    prefer: [a, b]
"""

# A Spark's prefill (the twin's default, seed 003) slowed ten times, attention included.
SLOWED = PerfSpec(prefill_tokens_per_s=615.0, prefill_attn_s_per_token_ctx=9.54e-8)
_CONTENT = re.compile(rb'"content":"[^"]')  # a content delta that is not empty (the role frame's is)


def _prompt(tokens: int) -> str:
    """`tokens` tokens of the twin's tokenizer (a word of four letters and its space is one)."""
    return " ".join("word" for _ in range(tokens))


@asynccontextmanager
async def slow_rig(tmp_path: Path, slowed: set[str], concurrency: int | None = None) -> AsyncIterator[Rig]:
    spec = FleetSpec(
        name="slow-prefill",
        devices={"a": DeviceSpec(), "b": DeviceSpec()},
        engines=[
            EngineSpec(
                name=n, served_model_name=MODEL, device=n, seed=i, perf=SLOWED if n in slowed else PerfSpec()
            )
            for i, n in enumerate(("a", "b"))
        ],
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    async with TwinFleet(spec, time_scale=1.0, ephemeral_ports=True) as fleet:
        await fleet.wait_ready(10)
        settings = Settings(
            backends=[
                {"name": n, "url": fleet.url(n), "flavor": "vllm", "max_concurrency": concurrency}
                for n in fleet.names
            ],
            pools=[{"model": MODEL, "backends": ["a", "b"]}],
            policy=policy,
            timeouts={"connect_s": 2.0},  # first token 600 s and idle gap 120 s: the defaults
        )
        async with (
            serve_gateway(settings) as (url, gateway, _),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=90)) as session,
        ):
            r = Rig(url, gateway, fleet, session)
            for name in fleet.names:
                await r.wait_status(name, Status.READY, timeout=10)
            yield r


async def _chat(r: Rig, tokens: int, stream: bool, max_tokens: int) -> tuple[Answer, float | None]:
    """An answer, and (streamed) the seconds to its first content."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": _prompt(tokens)}],
        "max_tokens": max_tokens,
        "stream": stream,
        "ignore_eos": True,
    }
    started, first = time.monotonic(), None
    raw = b""
    async with r.session.post(r.url + "/v1/chat/completions", json=body) as response:
        async for chunk in response.content.iter_any():
            raw += chunk
            if first is None and _CONTENT.search(raw):
                first = time.monotonic() - started
        headers = {k.lower(): v for k, v in response.headers.items()}
        return Answer(response.status, headers, raw, time.monotonic() - started), first


def _served(answer: Answer, stream: bool) -> bool:
    if stream:
        return answer.stream_ok
    return answer.status == 200 and bool(orjson.loads(answer.raw)["choices"][0]["message"]["content"])


def _metric(text: str, name: str, backend: str) -> float:
    prefix = f'{name}{{backend="{backend}"}} '
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    return float(lines[0][len(prefix) :]) if lines else -1.0


async def test_a_long_prompt_on_an_engine_with_a_tenth_of_the_prefill_rate_is_served_there_without_a_stall(
    tmp_path: Path,
) -> None:
    async with asyncio.timeout(120), slow_rig(tmp_path, slowed={"a"}) as r:
        long_stream = asyncio.create_task(_chat(r, 6000, stream=True, max_tokens=20))
        long_whole = asyncio.create_task(_chat(r, 6000, stream=False, max_tokens=20))
        await asyncio.sleep(0.5)
        short = [asyncio.create_task(_chat(r, 20, stream=True, max_tokens=20)) for _ in range(2)]
        results = await asyncio.gather(long_stream, long_whole, *short)
        metrics = await r.metrics()
    (streamed, ttft), (whole, _), *shorts = results
    figures = {
        "long_ttft_s": ttft and round(ttft, 1),
        "long_whole_s": round(whole.seconds, 1),
        "backends": [a.backend for a, _ in results],
        "stalls_a": _metric(metrics, "gateway_backend_stalls_total", "a"),
        "suspicions_a": _metric(metrics, "gateway_backend_stall_suspicions_total", "a"),
        "cleared_a": _metric(metrics, "gateway_backend_stall_cleared_by_progress_total", "a"),
    }
    print(f"\nslow prefill: {figures}")
    assert ttft is not None and 20.0 <= ttft <= 40.0, figures
    assert _served(streamed, True) and _served(whole, False), figures
    assert all(_served(a, True) for a, _ in shorts), figures
    assert figures["backends"] == ["a"] * 4, figures  # nothing moved to the other engine
    assert figures["stalls_a"] == 0.0, figures
    assert r.gateway.registry.backends["a"].stall_detail == "", figures  # never marked, never lifted


async def test_both_engines_busy_on_long_prefills_fail_nothing_and_their_suspicions_clear_by_progress(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each engine (two slots) runs a stream that goes silent while a long prompt sent after it is
    prefilled in the same steps: both engines suspected at once, both clear by their own progress."""
    caplog.set_level(logging.INFO, logger="gateway.stall")
    async with asyncio.timeout(120), slow_rig(tmp_path, slowed={"a", "b"}, concurrency=2) as r:
        tasks: list[asyncio.Task[tuple[Answer, float | None]]] = []
        for _ in ("a", "b"):  # static preference: a's two slots first, then b's
            tasks.append(asyncio.create_task(_chat(r, 20, stream=True, max_tokens=400)))
            await asyncio.sleep(1.0)  # under way
            tasks.append(asyncio.create_task(_chat(r, 4000, stream=True, max_tokens=20)))
            await asyncio.sleep(0.5)
        results = await asyncio.gather(*tasks)
        metrics = await r.metrics()
    figures: dict[str, Any] = {
        "backends": [a.backend for a, _ in results],
        "seconds": [round(a.seconds, 1) for a, _ in results],
    }
    for name in ("a", "b"):
        for metric in ("stalls", "stall_suspicions", "stall_cleared_by_progress"):
            figures[f"{metric}_{name}"] = _metric(metrics, f"gateway_backend_{metric}_total", name)
    print(f"\nboth busy: {figures}")
    for answer, _ in results:
        assert _served(answer, True), (answer.status, answer.raw[-300:], figures)
    assert sorted(figures["backends"]) == ["a", "a", "b", "b"], figures
    for name in ("a", "b"):
        assert figures[f"stalls_{name}"] == 0.0, figures
        assert figures[f"stall_cleared_by_progress_{name}"] >= 1.0, figures
    cleared = [rec.getMessage() for rec in caplog.records if "cleared by progress" in rec.getMessage()]
    assert any("backend a" in line for line in cleared) and any("backend b" in line for line in cleared)
