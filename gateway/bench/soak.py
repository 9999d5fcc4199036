"""`spark-gateway bench soak [--streams N] [--requests N] [--signals] [--malformed F] [--json]`: many
concurrent streams through the gateway while engines are killed, hung and restarted at random; nothing
may hang or be lost.

By default the twin engines run in this process and their faults are the twin's own (crash, hang,
restart). With `--signals` each engine is a `spark-gateway sim` process of its own and the faults are
real signals: SIGKILL then a restart on the same port (it warms up again), SIGSTOP then SIGCONT 1-6 s
later (a hung process holding its connections). `--malformed F` sends that share of the requests as
malformed ones of 20 kinds (gateway/bench/malformed.py) instead: each must get a 4xx with a JSON error.

Loopback only. A twin fleet runs in this process; the gateway runs as a `spark-gateway serve` subprocess
so its resident memory is measured cleanly: after a warm-up batch, a third into the run and at the
end; the growth reported is from a third in to the end (before that, buffers, connection pools and the
bounded live windows are still filling). `--trace` runs it under tracemalloc and reports the traced
bytes at the same points, and on stderr the allocation sites that grew. At most all but one
engine are faulty at any time, so every request is servable, and each one ends as exactly one of
completed, error (clear), lost or hung (gateway/bench/soak_load.py says which is which). Bounded by the
request count and by `--max-seconds` (requests not started by then are not sent). Each request carries
its id (`x-request-id`); the gateway logs at `warning` into a file, and what it logged about each hung
request (every failed attempt, with its time and cause) is printed on stderr.

The pieces: soak_load.py (one request and its outcome), soak_faults.py (the chaos), soak_memory.py (RSS
and tracemalloc), gateway_proc.py (the gateway subprocess, shared with `bench hostile`).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from gateway.bench.engine_procs import engine_processes
from gateway.bench.gateway_proc import GatewayProcess, free_port, gateway_process, rss_mb
from gateway.bench.malformed import malformed, send_raw
from gateway.bench.soak_faults import Chaos, SignalChaos
from gateway.bench.soak_load import MODEL, WATCHDOG_S, one_request
from gateway.bench.soak_memory import TRACE_DIR_ENV, TRACED_LAUNCHER, print_growth, settle, trace_dump
from gateway.sim.fleet import EngineSpec, FleetSpec
from gateway.sim.perf import DeviceSpec
from gateway.sim.runner import TwinFleet

WARM_SHARE = 1 / 3  # growth is measured from this far into the run to its end


@dataclass(frozen=True, slots=True)
class SoakResult:
    requests: int
    completed: int
    errors: int
    hung: int
    lost: int
    rss_start_mb: float  # after the warm-up batch
    rss_warm_mb: float  # a third into the run: buffers and bounded windows have filled by then
    rss_end_mb: float
    rss_growth_pct: float  # end against rss_warm_mb: growth once warm
    inflight_end: int  # requests the gateway still had in flight at the end sample (0 after settling)
    traced_start_mb: float | None  # tracemalloc's traced bytes (--trace), beside RSS
    traced_warm_mb: float | None
    traced_end_mb: float | None
    malformed: int  # malformed requests sent
    malformed_wrong: int  # of those, answered other than a 4xx with a JSON error body
    streams: int
    faults: int
    hangs: int  # of the faults, hangs (SIGSTOP, or the twin's hang)
    stalls: int  # times the gateway found a backend stalled (gateway_backend_stalls_total, all backends)
    seconds: float
    kinds: dict[str, int]  # "outcome: what the client saw" -> count


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "soak", help="concurrent streams through the gateway while engines crash, hang and restart"
    )
    parser.add_argument("--streams", type=int, default=1000, help="concurrent streams (default 1000)")
    parser.add_argument("--requests", type=int, default=4000, help="requests in all (default 4000)")
    parser.add_argument("--engines", type=int, default=4, help="twin engines (default 4)")
    parser.add_argument("--max-seconds", type=float, default=90.0, help="stop sending after this long")
    parser.add_argument("--time-scale", type=float, default=50.0, help="twin simulated s per real s")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--signals", action="store_true", help="engines as processes: SIGKILL, SIGSTOP")
    parser.add_argument("--malformed", type=float, default=0.0, help="share of malformed requests")
    parser.add_argument("--json", action="store_true", help='print {"results": [...]}')
    parser.add_argument(
        "--trace",
        action="store_true",
        help="run the gateway under tracemalloc: traced bytes and the top growth sites (slower)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    result = asyncio.run(soak(args))
    if args.json:
        fields = {k: v for k, v in asdict(result).items() if k != "streams"}
        print(json.dumps({"results": [fields]}))
    else:
        for key, value in asdict(result).items():
            print(f"{key:>14}: {value}")
    return 0 if result.hung == result.lost == result.malformed_wrong == 0 else 1


def _fleet(engines: int) -> FleetSpec:
    names = [f"e{i}" for i in range(engines)]
    return FleetSpec(
        name="soak",
        devices={name: DeviceSpec() for name in names},
        # 100 simulated seconds of warm-up: a restart is a few real seconds of "starting".
        engines=[
            EngineSpec(name=n, served_model_name=MODEL, device=n, warmup_s=100.0, seed=i)
            for i, n in enumerate(names)
        ],
    )


def _gateway_config(urls: dict[str, str]) -> dict[str, Any]:
    return {
        "backends": [{"name": n, "url": u, "flavor": "vllm"} for n, u in urls.items()],
        "pools": [{"model": MODEL, "backends": list(urls)}],
        # A loaded loopback host answers probes and connects late: short timeouts would call it dead.
        "probe": {"interval_s": 0.5, "starting_interval_s": 0.25, "timeout_s": 3.0},
        # The first-token timeout covers a stream's wait in an engine's own queue (long with 1,000
        # streams on four engines); the idle gap only runs once tokens flow. The queue deadline plus the
        # first-token timeout (50 s) is the longest a request waits for its first content, failovers
        # included (proxy/attempts.py): under the watchdog, so a hung request is a fault, not a wait.
        "timeouts": {"connect_s": 3.0, "first_byte_s": 20.0, "idle_s": 5.0},
        "limits": {"max_attempts": len(urls), "connections": 4096},
        "queue": {"max_queue": 4096, "timeout_s": 30.0},
        "breaker": {"cooldown_s": 2.0},
        "shutdown": {"drain_timeout_s": 5.0},
        "state_dir": None,  # a bench keeps no state: nothing read from or written to the user's cache
    }


async def soak(args: argparse.Namespace) -> SoakResult:
    rng = random.Random(args.seed)
    if args.signals:
        names = [f"e{i}" for i in range(args.engines)]
        ports = [free_port() for _ in names]
        async with engine_processes(names, ports, MODEL, args.time_scale, warmup_s=100.0) as engines:
            urls = {name: engine.url for name, engine in engines.items()}
            return await _with_gateway(args, urls, SignalChaos(engines, rng), rng)
    async with TwinFleet(_fleet(args.engines), time_scale=args.time_scale, ephemeral_ports=True) as fleet:
        await fleet.wait_ready(30)
        urls = {name: fleet.url(name) for name in fleet.names}
        return await _with_gateway(args, urls, Chaos(fleet, rng), rng)


async def _with_gateway(
    args: argparse.Namespace, urls: dict[str, str], chaos: Chaos | SignalChaos, rng: random.Random
) -> SoakResult:
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        trace = Path(tmp) if args.trace else None
        # Under tracemalloc every import is traced: the gateway takes many times longer to start.
        traced = {"launcher": TRACED_LAUNCHER, "env": {TRACE_DIR_ENV: tmp}, "ready_timeout_s": 180.0}
        launch: dict[str, Any] = traced if trace else {}
        log = Path(tmp) / "gateway.log"  # warnings name each failed attempt with the request's id
        async with gateway_process(_gateway_config(urls), log_level="warning", log=log, **launch) as gateway:
            result = await _drive(args, chaos, gateway, rng, trace)
        _print_hung(result, log)
        return result


def _print_hung(result: SoakResult, log: Path) -> None:
    """What the gateway logged about each hung request (by the id the client sent), on stderr."""
    tags = [m.group(1) for kind in result.kinds for m in [re.search(r"\((soak-\d+|warm-\d+),", kind)] if m]
    if not tags:
        return
    lines = log.read_text(errors="replace").splitlines()
    for tag in tags:
        print(f"gateway log for hung request {tag}:", file=sys.stderr)
        for line in (line for line in lines if f"request {tag}:" in line or f"request {tag} " in line):
            print(f"  {line}", file=sys.stderr)


class _Load:
    """The run's requests: sent `streams` at a time until the count or the time is spent; what each
    ended as."""

    def __init__(self, args: argparse.Namespace, url: str, rng: random.Random) -> None:
        self.args, self.url, self.rng = args, url, rng
        self.started = time.monotonic()
        self.outcomes: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()
        self.bad = malformed(MODEL, 1000, rng)
        self._gate = asyncio.Semaphore(args.streams)
        self._tags = itertools.count()

    async def send_all(self, session: aiohttp.ClientSession) -> None:
        await asyncio.gather(*(self._guarded(session) for _ in range(self.args.requests)))

    def progress(self) -> float:
        """How far into the run, by requests done or by time, whichever is further."""
        done = sum(self.outcomes[k] for k in ("completed", "errors", "hung", "lost", "malformed"))
        elapsed = time.monotonic() - self.started
        return max(done / int(self.args.requests), elapsed / float(self.args.max_seconds))

    async def _guarded(self, session: aiohttp.ClientSession) -> None:
        async with self._gate:
            if time.monotonic() - self.started >= self.args.max_seconds:
                return
            if self.rng.random() < self.args.malformed:
                await self._malformed()
                return
            outcome, kind = await one_request(session, self.url, self.rng, f"soak-{next(self._tags)}")
            self.outcomes[outcome] += 1
            self.kinds[f"{outcome}: {kind}"] += 1

    async def _malformed(self) -> None:
        host, port = self.url.removeprefix("http://").split(":")
        name, raw = self.bad[self.outcomes["malformed"] % len(self.bad)]
        answer = await send_raw(host, int(port), raw, timeout=WATCHDOG_S)
        self.outcomes["malformed"] += 1
        if not (400 <= answer.status < 500 and answer.json_error):
            self.outcomes["malformed_wrong"] += 1
            self.kinds[f"malformed answered {answer.status}: {name}"] += 1


async def _drive(
    args: argparse.Namespace,
    chaos: Chaos | SignalChaos,
    gateway: GatewayProcess,
    rng: random.Random,
    trace: Path | None,
) -> SoakResult:
    async def memory(n: int) -> tuple[float, float | None]:
        return rss_mb(gateway.pid), (await trace_dump(gateway.pid, trace, n) if trace else None)

    connector = aiohttp.TCPConnector(limit=args.streams)
    async with aiohttp.ClientSession(connector=connector) as session:
        warm = [one_request(session, gateway.url, rng, f"warm-{i}") for i in range(min(200, args.streams))]
        outcomes = Counter(outcome for outcome, _ in await asyncio.gather(*warm))
        if outcomes["completed"] != sum(outcomes.values()):
            raise RuntimeError(f"warm-up requests failed before any fault: {outcomes}")
        start = await memory(0)
        load = _Load(args, gateway.url, rng)

        async def warm_sample() -> tuple[float, float | None]:
            while load.progress() < WARM_SHARE:
                await asyncio.sleep(0.1)
            return await memory(1)

        chaos_task = asyncio.create_task(chaos.run())
        warm_task = asyncio.create_task(warm_sample())
        try:
            await load.send_all(session)
            warmed = await warm_task
        finally:
            warm_task.cancel()
            chaos_task.cancel()
            await asyncio.gather(chaos_task, warm_task, return_exceptions=True)
            await chaos.stop()
        seconds = time.monotonic() - load.started
        inflight_end = await settle(session, gateway.url)
        stalls = await _stalls_found(session, gateway.url)
        end = await memory(2)
        if trace:
            print_growth(trace)
    counts = {"faults": chaos.faults, "hangs": chaos.hangs, "stalls": stalls}
    return _result(args, load, counts, seconds, inflight_end, (start, warmed, end))


async def _stalls_found(session: aiohttp.ClientSession, url: str) -> int:
    """Times the gateway found a backend stalled, all backends together: beside the hangs injected, it
    shows whether hang detection fired on engines that were only slow."""
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    prefix = "gateway_backend_stalls_total{"
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)))


def _result(
    args: argparse.Namespace,
    load: _Load,
    counts: dict[str, int],
    seconds: float,
    inflight_end: int,
    memory: tuple[tuple[float, float | None], ...],
) -> SoakResult:
    (rss_start, traced_start), (rss_warm, traced_warm), (rss_end, traced_end) = memory
    outcomes = load.outcomes
    return SoakResult(
        requests=sum(outcomes[key] for key in ("completed", "errors", "hung", "lost")),
        completed=outcomes["completed"],
        errors=outcomes["errors"],
        hung=outcomes["hung"],
        lost=outcomes["lost"],
        rss_start_mb=rss_start,
        rss_warm_mb=rss_warm,
        rss_end_mb=rss_end,
        inflight_end=inflight_end,
        rss_growth_pct=round((rss_end - rss_warm) / rss_warm * 100, 1) if rss_warm else 0.0,
        traced_start_mb=traced_start,
        traced_warm_mb=traced_warm,
        traced_end_mb=traced_end,
        malformed=outcomes["malformed"],
        malformed_wrong=outcomes["malformed_wrong"],
        streams=args.streams,
        faults=counts["faults"],
        hangs=counts["hangs"],
        stalls=counts["stalls"],
        seconds=round(seconds, 1),
        kinds=dict(load.kinds.most_common()),
    )
