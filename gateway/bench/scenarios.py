"""`spark-gateway bench scenarios`: seed 003's four serving scenarios against an endpoint or a twin fleet.

    A  single decode      512 in / 512 out,  1 concurrent
    B  prefill-bound     8192 in / 256 out,  4 concurrent
    C  concurrent stress 2048 in / 512 out, 16 concurrent
    D  chat profile      2048 in / 256 out,  2 concurrent

Like `vllm bench serve --max-concurrency c`: every request is queued at once and at most c are in flight.
Against a URL the numbers are wall clock; against a fleet each engine of the twin runs in-process and the
measured durations are converted back to simulated time with the fleet clock's time scale. Engines on
different devices run their scenarios at the same time (they cannot disturb each other); engines that
share a device run one after the other, so a scenario never measures its neighbour's load.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp
import orjson
from tqdm import tqdm

from gateway.bench.client import RequestResult, StreamingClient
from gateway.sim.text import make_prompt


@dataclass(frozen=True)
class Scenario:
    name: str
    prompt_tokens: int
    max_tokens: int
    concurrency: int
    requests: int  # default count (seed 003: C ran 64; A ran 20, halved here: A has no count effect)


SCENARIOS: dict[str, Scenario] = {
    "A": Scenario("A", 512, 512, 1, 10),
    "B": Scenario("B", 8192, 256, 4, 16),
    "C": Scenario("C", 2048, 512, 16, 64),
    "D": Scenario("D", 2048, 256, 2, 16),
    # Seed 001's llama-benchy points (pp512, tg128, depth 0) at concurrency 1 and 8.
    "tg-c1": Scenario("tg-c1", 512, 128, 1, 4),
    "tg-c8": Scenario("tg-c8", 512, 128, 8, 16),
}
DEFAULT_SCENARIOS = ("A", "B", "C", "D")


@dataclass(frozen=True)
class ScenarioResult:
    target: str
    scenario: str
    output_tok_s: float
    mean_ttft_ms: float
    mean_tpot_ms: float
    mean_itl_ms: float
    p99_itl_ms: float
    requests: int
    failures: int


def summarize(
    target: str, scenario: str, results: Sequence[RequestResult], duration_s: float
) -> ScenarioResult:
    """vllm bench serve's definitions: output tok/s over the whole run, means per request (TTFT, TPOT),
    ITL over every chunk gap of every successful request, P99 by linear interpolation."""
    ok = [r for r in results if r.ok]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpots = [r.tpot_s for r in ok if r.tpot_s is not None]
    itls = [gap for r in ok for gap in r.itls_s]
    tokens = sum(r.output_tokens for r in ok)
    return ScenarioResult(
        target=target,
        scenario=scenario,
        output_tok_s=round(tokens / duration_s, 2) if duration_s > 0 else 0.0,
        mean_ttft_ms=_ms(statistics.fmean(ttfts)) if ttfts else math.nan,
        mean_tpot_ms=_ms(statistics.fmean(tpots)) if tpots else math.nan,
        mean_itl_ms=_ms(statistics.fmean(itls)) if itls else math.nan,
        p99_itl_ms=_ms(_percentile(itls, 99)) if itls else math.nan,
        requests=len(results),
        failures=len(results) - len(ok),
    )


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _percentile(values: Sequence[float], pct: float) -> float:
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Target:
    """One OpenAI endpoint to measure; `time_scale` converts its wall-clock durations to reported ones."""

    name: str
    url: str
    model: str
    time_scale: float = 1.0


async def run_scenario(
    client: StreamingClient, scenario: Scenario, requests: int, progress: tqdm[Any] | None = None
) -> tuple[list[RequestResult], float]:
    """All requests queued at once, at most `concurrency` in flight; returns results and wall seconds."""
    gate = asyncio.Semaphore(scenario.concurrency)
    # A different prompt per request, so no engine can serve one from another's prefix cache.
    prompts = [make_prompt(scenario.prompt_tokens, seed=i) for i in range(requests)]

    async def one(prompt: str) -> RequestResult:
        async with gate:
            result = await client.complete(prompt, scenario.max_tokens)
        if progress is not None:
            progress.update(1)
        return result

    start = time.perf_counter()
    results = await asyncio.gather(*(one(p) for p in prompts))
    return list(results), time.perf_counter() - start


async def run_target(
    session: aiohttp.ClientSession,
    target: Target,
    scenarios: Sequence[Scenario],
    requests: int | None,
    progress: tqdm[Any] | None = None,
) -> list[ScenarioResult]:
    client = StreamingClient(session, target.url, target.model)
    summaries = []
    for scenario in scenarios:
        results, wall = await run_scenario(client, scenario, requests or scenario.requests, progress)
        scaled = [r.scaled(target.time_scale) for r in results]
        summaries.append(summarize(target.name, scenario.name, scaled, wall * target.time_scale))
    return summaries


async def run_targets(
    groups: Sequence[Sequence[Target]], scenarios: Sequence[Scenario], requests: int | None
) -> list[ScenarioResult]:
    """Groups run concurrently; the targets of one group run one after the other."""
    total = sum(len(g) for g in groups) * sum(requests or s.requests for s in scenarios)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=600)
    connector = aiohttp.TCPConnector(limit=0)
    with tqdm(total=total, unit="req", file=sys.stderr, desc="scenarios") as progress:
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

            async def group_run(group: Sequence[Target]) -> list[ScenarioResult]:
                out: list[ScenarioResult] = []
                for target in group:
                    out += await run_target(session, target, scenarios, requests, progress)
                return out

            per_group = await asyncio.gather(*(group_run(g) for g in groups))
    return [result for group in per_group for result in group]


async def run_fleet(
    path: str, time_scale: float, scenarios: Sequence[Scenario], requests: int | None
) -> list[ScenarioResult]:
    # Imported here so benchmarking a plain URL does not load the twin.
    from gateway.sim.fleet import load_fleet
    from gateway.sim.runner import TwinFleet

    spec = load_fleet(path)
    async with TwinFleet(spec, time_scale=time_scale, ephemeral_ports=True) as fleet:
        await fleet.wait_ready(timeout_s=max(30.0, 2 * max(e.warmup_s for e in spec.engines) / time_scale))
        by_device: dict[str, list[Target]] = {}
        for engine in spec.engines:
            target = Target(engine.name, fleet.url(engine.name), engine.served_model_name, time_scale)
            by_device.setdefault(engine.device, []).append(target)
        return await run_targets(list(by_device.values()), scenarios, requests)


def render_table(results: Sequence[ScenarioResult]) -> str:
    header = ("target", "scen", "out tok/s", "TTFT ms", "TPOT ms", "ITL ms", "P99 ITL ms", "reqs", "fail")
    rows = [header] + [
        (
            r.target,
            r.scenario,
            f"{r.output_tok_s:.2f}",
            f"{r.mean_ttft_ms:.0f}",
            f"{r.mean_tpot_ms:.2f}",
            f"{r.mean_itl_ms:.2f}",
            f"{r.p99_itl_ms:.1f}",
            str(r.requests),
            str(r.failures),
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in rows)


def _handle(args: argparse.Namespace) -> int:
    chosen = [SCENARIOS[name] for name in (args.scenario or DEFAULT_SCENARIOS)]
    if args.fleet:
        results = asyncio.run(run_fleet(args.fleet, args.time_scale, chosen, args.requests))
    else:
        target = Target(args.model, args.url, args.model, 1.0)
        results = asyncio.run(run_targets([[target]], chosen, args.requests))
    if args.json:
        print(orjson.dumps({"results": [asdict(r) for r in results]}).decode())
    else:
        print(render_table(results))
    return 1 if any(r.failures for r in results) else 0


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "scenarios", help="seed 003's serving scenarios (A-D) against an endpoint or a twin fleet"
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--url", help="OpenAI-compatible base URL (without /v1); needs --model")
    source.add_argument("--fleet", help="twin fleet file: every engine is started in-process and measured")
    parser.add_argument("--model", help="model name to send with --url")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=25.0,
        help="twin clock speed-up for --fleet (results are reported in simulated time)",
    )
    parser.add_argument(
        "--requests", type=int, help="requests per scenario (default: A 10, B 16, C 64, D 16)"
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=sorted(SCENARIOS),
        help="run only these scenarios (repeatable; default A B C D)",
    )
    parser.add_argument("--json", action="store_true", help='print {"results": [...]} instead of a table')
    parser.set_defaults(handler=_validated(parser))


def _validated(parser: argparse.ArgumentParser) -> Any:
    def handler(args: argparse.Namespace) -> int:
        if args.url and not args.model:
            parser.error("--url needs --model")
        if args.requests is not None and args.requests < 1:
            parser.error("--requests must be at least 1")
        if args.time_scale <= 0:
            parser.error("--time-scale must be positive")
        return _handle(args)

    return handler
