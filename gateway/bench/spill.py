"""`spark-gateway bench spill`: how the overload spill shares traffic between a preferred engine and
another one, under a steady overload and under a burst.

Loopback only. Two twin vLLM engines on devices of their own (in this process), each running at most
`--slots` sequences; the gateway (a `spark-gateway serve` subprocess) prefers the first with a static
policy. Two modes are run one after the other, with the spill on and with `spill: false`:

- steady: `--rate` streams per second for `--seconds`, more than the preferred engine runs at once.
  Printed: the share that went to the preferred engine per second of arrivals, the longest stretch of
  arrivals (in seconds) that all went to one engine, and the streams' p50 and p99 time to their end;
- burst: `--burst` streams posted at once after a quiet spell: how many went to each engine.

The run with the spill off is the baseline its p99 is compared with.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from gateway.bench.gateway_proc import gateway_process
from gateway.sim.fleet import EngineSpec, FleetSpec
from gateway.sim.perf import DeviceSpec, PerfSpec
from gateway.sim.runner import TwinFleet

MODEL = "spill-model"
NAMES = ("preferred", "other")


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "spill", help="the overload spill's share over time"
    )
    parser.add_argument("--slots", type=int, default=8, help="sequences each engine runs at once")
    parser.add_argument("--rate", type=float, default=16.0, help="streams per second in the steady mode")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the steady mode")
    parser.add_argument("--burst", type=int, default=200, help="streams posted at once")
    parser.add_argument("--tokens", type=int, default=200, help="tokens per stream")
    parser.add_argument("--time-scale", type=float, default=5.0, help="twin simulated s per real s")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    result = asyncio.run(_both(args))
    if args.json:
        print(json.dumps(result))
    else:
        for mode, figures in result.items():
            print(f"{mode}:")
            for key, value in figures.items():
                print(f"  {key:>24}: {value}")
    return 0


async def _both(args: argparse.Namespace) -> dict[str, Any]:
    spec = FleetSpec(
        name="spill",
        devices={n: DeviceSpec() for n in NAMES},
        engines=[
            EngineSpec(
                name=n, served_model_name=MODEL, device=n, seed=i, perf=PerfSpec(max_num_seqs=args.slots)
            )
            for i, n in enumerate(NAMES)
        ],
    )
    out: dict[str, Any] = {}
    async with TwinFleet(spec, time_scale=args.time_scale, ephemeral_ports=True) as fleet:
        await fleet.wait_ready(30)
        for spill in (True, False):
            out["spill" if spill else "no spill"] = await _one(fleet, args, spill)
    return out


async def _one(fleet: TwinFleet, args: argparse.Namespace, spill: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        policy = Path(folder) / "policy.yaml"
        policy.write_text(
            "version: 1\nrouting: static\nprofiles:\n  - name: default\n"
            f"    prefer: [{NAMES[0]}, {NAMES[1]}]\n    spill: {'true' if spill else 'false'}\n"
        )
        config = {
            "backends": [{"name": n, "url": fleet.url(n), "flavor": "vllm"} for n in NAMES],
            "pools": [{"model": MODEL, "backends": list(NAMES)}],
            "policy": str(policy),
            "state_dir": None,
        }
        async with (
            gateway_process(config) as gateway,
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=300)
            ) as session,
        ):
            steady = await _steady(session, gateway.url, args)
            await asyncio.sleep(5.0)  # quiet: everything finished
            burst = await asyncio.gather(
                *(_stream(session, gateway.url, args.tokens) for _ in range(args.burst))
            )
    return {**steady, "burst": dict(Counter(backend for _, backend, _ in burst))}


async def _steady(session: aiohttp.ClientSession, url: str, args: argparse.Namespace) -> dict[str, Any]:
    began = time.monotonic()
    tasks = []
    for i in range(int(args.rate * args.seconds)):
        await asyncio.sleep(max(0.0, began + i / args.rate - time.monotonic()))
        tasks.append(asyncio.create_task(_stream(session, url, args.tokens)))
    answers = await asyncio.gather(*tasks)
    seconds = sorted(s for _, _, s in answers)
    per_second: dict[int, list[str]] = {}
    for sent, backend, _ in answers:
        per_second.setdefault(int(sent - began), []).append(backend)
    share = [round(v.count(NAMES[0]) / len(v), 2) for _, v in sorted(per_second.items())]
    return {
        "preferred_share_per_s": share,
        "longest_one_engine_s": round(_longest_block(sorted(answers)), 2),
        "p50_s": round(statistics.median(seconds), 3),
        "p99_s": round(seconds[int(0.99 * (len(seconds) - 1))], 3),
        "served": dict(Counter(backend for _, backend, _ in answers)),
    }


def _longest_block(answers: list[tuple[float, str, float]]) -> float:
    """The longest stretch of time over which consecutive arrivals all went to one engine."""
    longest, start = 0.0, 0
    for i in range(1, len(answers) + 1):
        if i == len(answers) or answers[i][1] != answers[start][1]:
            longest = max(longest, answers[i - 1][0] - answers[start][0])
            start = i
    return longest


async def _stream(session: aiohttp.ClientSession, url: str, tokens: int) -> tuple[float, str, float]:
    """(sent at, the backend that served it, seconds to the stream's end)."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "go"}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
    }
    sent = time.monotonic()
    async with session.post(url + "/v1/chat/completions", json=body) as response:
        backend = response.headers.get("x-gateway-backend", "-")
        async for _ in response.content.iter_any():
            pass
    return sent, backend, time.monotonic() - sent
