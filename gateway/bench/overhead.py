"""`spark-gateway bench overhead [--json]`: what the gateway adds, direct vs through the gateway.

Three processes: a minimal fast fake engine (raw ASGI on uvicorn+uvloop+httptools; it streams a fixed
number of tokens at a fixed pace and does nothing else, so it is never the bottleneck the way a twin
engine's batching model would be), the gateway on one worker in front of it, and this process as the
load generator. At each concurrency level, N client loops stream back to back, first directly to the
engine, then through the gateway. Reported per level: added TTFT p50/p99 (time to the first body bytes,
via minus direct) and the stream throughput ratio (SSE frames received per second, via / direct).
With `--page-client`, a status page client is connected to the gateway while it is measured: it loads /ui
and reads what the page reads, at the page's pace (api/ui.py PAGE_POLLS), so the gateway's CPU per frame
relayed shows what an open status page costs.

All three share the machine's cores, so the table also gives each process's CPU use over the measured
window (share of one core, from /proc) and the idle share of the whole machine: a gateway near 100% is
CPU-bound, a load generator near 100% or a machine with no idle time means the figures say more about
the box than about the gateway. The JSON output keeps to the four headline fields.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import uvicorn
import uvloop

from gateway.api.asgi import Receive, Scope, Send, read_body, send_bytes
from gateway.api.ui import PAGE_FILES, PAGE_POLLS, POLL_INTERVAL_S

JSON = {"content-type": "application/json"}  # the gateway answers 415 to any other body


@dataclass(frozen=True)
class EngineShape:
    tokens: int = 32
    ttft_s: float = 0.010
    itl_s: float = 0.020


@dataclass(frozen=True)
class Level:
    concurrency: int
    added_ttft_p50_ms: float
    added_ttft_p99_ms: float
    throughput_ratio: float
    direct_ttft_p50_ms: float
    via_ttft_p50_ms: float
    direct_frames_per_s: float
    via_frames_per_s: float
    via_cpu: dict[str, float]  # share of one core per process through the gateway, and machine idle
    gateway_overhead_p50_ms: float  # the gateway's own time before the upstream call (its header)
    page_rounds: int = 0  # the status page client's rounds of reads started in the measured window
    page_round_max_ms: float = 0.0  # its slowest round: how long the page waited for its data


@dataclass(frozen=True)
class Pids:
    engine: int
    gateway: int


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("overhead", help="gateway overhead vs direct")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--concurrency", default="1,64,256", help="comma-separated stream counts")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per level and path")
    parser.add_argument("--tokens", type=int, default=EngineShape.tokens, help="tokens per stream")
    parser.add_argument("--itl-ms", type=float, default=EngineShape.itl_s * 1000, help="engine pace")
    parser.add_argument("--transport", default="aiohttp", choices=["aiohttp", "httpx"])
    parser.add_argument(
        "--page-client", action="store_true", help="keep a status page client (/ui) polling the gateway"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.transport == "httpx":
        from gateway.bench.transport import httpx_missing

        missing = httpx_missing("bench overhead --transport httpx")
        if missing:
            print(missing, file=sys.stderr)
            return 2
    levels = [int(c) for c in args.concurrency.split(",")]
    shape = EngineShape(tokens=args.tokens, itl_s=args.itl_ms / 1000)
    results = measure(levels, shape, args.seconds, args.transport, args.page_client)
    if args.json:
        keys = ("concurrency", "added_ttft_p50_ms", "added_ttft_p99_ms", "throughput_ratio")
        print(orjson.dumps({"results": [{k: asdict(r)[k] for k in keys} for r in results]}).decode())
    else:
        print(render(results, shape, args.transport))
        if args.page_client:
            rounds = ", ".join(str(r.page_rounds) for r in results)
            slowest = ", ".join(f"{r.page_round_max_ms:.0f}" for r in results)
            print(f"page client: {rounds} rounds of {len(PAGE_POLLS)} reads, every {POLL_INTERVAL_S:g} s")
            print(f"page client's slowest round: {slowest} ms")
    return 0


def render(results: list[Level], shape: EngineShape, transport: str) -> str:
    lines = [
        f"engine: fake, {shape.tokens} tokens/stream, TTFT {shape.ttft_s * 1000:g} ms, "
        f"ITL {shape.itl_s * 1000:g} ms; gateway: 1 worker, {transport} upstream",
        "streams  added TTFT p50  added TTFT p99  throughput via/direct"
        "  (TTFT p50 direct / via, SSE frames/s direct / via; via CPU % of a core: gateway, engine,"
        " load generator; machine idle %; gateway CPU per frame relayed;"
        " gateway's own pre-upstream time p50)",
    ]
    for r in results:
        cpu = r.via_cpu
        lines.append(
            f"{r.concurrency:>7}  {r.added_ttft_p50_ms:>11.2f} ms  {r.added_ttft_p99_ms:>11.2f} ms  "
            f"{r.throughput_ratio:>20.3f}  ({r.direct_ttft_p50_ms:.2f} / {r.via_ttft_p50_ms:.2f} ms, "
            f"{r.direct_frames_per_s:.0f} / {r.via_frames_per_s:.0f}; "
            f"{cpu['gateway']:.0f} / {cpu['engine']:.0f} / {cpu['loadgen']:.0f} %, idle {cpu['idle']:.0f} %; "
            f"{_per_frame_us(cpu['gateway'], r.via_frames_per_s):.0f} us/frame; "
            f"{r.gateway_overhead_p50_ms:.2f} ms)"
        )
    return "\n".join(lines)


def _per_frame_us(cpu_percent: float, frames_per_s: float) -> float:
    """The gateway's CPU per SSE frame relayed (request work included): a figure that holds up when
    other processes take CPU away, unlike latency and throughput."""
    return cpu_percent / 100 / frames_per_s * 1e6 if frames_per_s else 0.0


def measure(
    levels: list[int], shape: EngineShape, seconds: float, transport: str = "aiohttp", page: bool = False
) -> list[Level]:
    spawn = multiprocessing.get_context("spawn")
    engine_port, gateway_port = _free_port(), _free_port()
    engine = spawn.Process(target=_run_engine, args=(engine_port, shape), daemon=True)
    engine.start()
    gateway = spawn.Process(target=_run_gateway, args=(gateway_port, engine_port, transport), daemon=True)
    gateway.start()
    try:
        stream_s = shape.ttft_s + shape.tokens * shape.itl_s
        pids = Pids(engine.pid or 0, gateway.pid or 0)
        return uvloop.run(_measure_all(levels, engine_port, gateway_port, seconds, stream_s, pids, page))
    finally:
        for process in (gateway, engine):
            process.terminate()
            process.join(10)


async def _measure_all(
    levels: list[int],
    engine_port: int,
    gateway_port: int,
    seconds: float,
    stream_s: float,
    pids: Pids,
    page: bool = False,
) -> list[Level]:
    direct_url, via_url = f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{gateway_port}"
    await _wait(direct_url + "/health")
    await _wait(via_url + "/ready")
    results = []
    for concurrency in levels:
        direct = await _load(direct_url, concurrency, seconds, stream_s, pids)
        via = await _load(via_url, concurrency, seconds, stream_s, pids, page)
        results.append(_compare(concurrency, direct, via))
    return results


@dataclass
class _Run:
    ttfts: list[float]
    frames_per_s: float
    cpu: dict[str, float]
    overheads: list[float]  # x-gateway-overhead-ms of each measured answer (via the gateway only)
    page_rounds: int = 0
    page_round_max_ms: float = 0.0


def _compare(concurrency: int, direct: _Run, via: _Run) -> Level:
    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return Level(
        concurrency=concurrency,
        added_ttft_p50_ms=round(pct(via.ttfts, 0.5) - pct(direct.ttfts, 0.5), 3),
        added_ttft_p99_ms=round(pct(via.ttfts, 0.99) - pct(direct.ttfts, 0.99), 3),
        throughput_ratio=round(via.frames_per_s / direct.frames_per_s, 4),
        direct_ttft_p50_ms=round(pct(direct.ttfts, 0.5), 3),
        via_ttft_p50_ms=round(pct(via.ttfts, 0.5), 3),
        direct_frames_per_s=round(direct.frames_per_s, 1),
        via_frames_per_s=round(via.frames_per_s, 1),
        via_cpu=via.cpu,
        gateway_overhead_p50_ms=round(pct(via.overheads, 0.5) / 1000, 3) if via.overheads else 0.0,
        page_rounds=via.page_rounds,
        page_round_max_ms=via.page_round_max_ms,
    )


async def _load(
    url: str, concurrency: int, seconds: float, stream_s: float, pids: Pids, page: bool = False
) -> _Run:
    """`concurrency` client loops streaming back to back. Their starts are spread over one stream's
    duration, as independent users would be; started all at once they would stay in lockstep and every
    first token would queue behind a burst of `concurrency` simultaneous arrivals."""
    body = orjson.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    ttfts: list[float] = []
    overheads: list[float] = []
    frames = [0]
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        measure_from = start + stream_s + 0.5
        stop_at = measure_from + seconds

        async def client(offset: float) -> None:
            await asyncio.sleep(offset)
            while time.perf_counter() < stop_at:
                sent = time.perf_counter()
                async with session.post(url + "/v1/chat/completions", data=body, headers=JSON) as response:
                    first = None
                    async for chunk in response.content.iter_any():
                        now = time.perf_counter()
                        first = first or now
                        if measure_from <= now < stop_at:
                            frames[0] += chunk.count(b"\n\n")
                if measure_from <= sent and first is not None and first < stop_at:
                    ttfts.append(first - sent)
                    overhead = response.headers.get("x-gateway-overhead-ms")
                    if overhead is not None:
                        overheads.append(float(overhead))

        async def sample_cpu() -> dict[str, float]:
            await asyncio.sleep(measure_from - time.perf_counter())
            before = _cpu_readings(pids)
            await asyncio.sleep(stop_at - time.perf_counter())
            return _cpu_share(before, _cpu_readings(pids))

        cpu = asyncio.ensure_future(sample_cpu())
        rounds = asyncio.ensure_future(_page_client(session, url, measure_from, stop_at) if page else _none())
        await asyncio.gather(*(client(stream_s * i / concurrency) for i in range(concurrency)))
        page_rounds, page_max = await rounds
        return _Run(ttfts, frames[0] / seconds, await cpu, overheads, page_rounds, page_max)


async def _none() -> tuple[int, float]:
    return 0, 0.0


async def _page_client(
    session: aiohttp.ClientSession, url: str, measure_from: float, stop_at: float
) -> tuple[int, float]:
    """What an open status page asks of the gateway: its files once, then its reads every poll. Returns
    the rounds started within the measured window and the slowest round's time in ms."""
    for path in PAGE_FILES:
        async with session.get(url + path) as response:
            await response.read()
    rounds, slowest = 0, 0.0

    async def read(path: str) -> None:
        async with session.get(url + path) as response:
            if response.status != 200:
                raise RuntimeError(f"page client: {path} answered HTTP {response.status}")
            await response.read()

    while time.perf_counter() < stop_at:
        started = time.perf_counter()
        await asyncio.gather(*(read(path) for path in PAGE_POLLS))
        took = time.perf_counter() - started
        rounds += measure_from <= started < stop_at
        slowest = max(slowest, took * 1000)
        await asyncio.sleep(max(0.0, POLL_INTERVAL_S - took))
    return rounds, round(slowest, 1)


def _cpu_readings(pids: Pids) -> dict[str, float]:
    """CPU seconds so far of each process, the machine's idle seconds (all cores) and the wall clock."""
    return {
        "gateway": _process_cpu(pids.gateway),
        "engine": _process_cpu(pids.engine),
        "loadgen": time.process_time(),
        "idle": _machine_idle(),
        "wall": time.perf_counter(),
    }


def _cpu_share(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Percent of one core per process over the window; idle as percent of the whole machine."""
    wall = after["wall"] - before["wall"]
    share = {k: round(100 * (after[k] - before[k]) / wall, 1) for k in ("gateway", "engine", "loadgen")}
    share["idle"] = round(100 * (after["idle"] - before["idle"]) / wall / (os.cpu_count() or 1), 1)
    return share


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc; 0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_idle() -> float:
    """Idle + iowait seconds summed over all cores (Linux /proc/stat; 0 where there is none)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return 0.0
    return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")


async def _wait(url: str, timeout: float = 30.0) -> None:
    async with aiohttp.ClientSession() as session, asyncio.timeout(timeout):
        while True:
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FakeEngine:
    """The minimal fast engine: OpenAI-shaped SSE at a fixed pace, nothing else."""

    def __init__(self, shape: EngineShape) -> None:
        self.shape = shape
        delta = {"choices": [{"index": 0, "delta": {"content": "tok "}, "finish_reason": None}]}
        self.frame = (
            b"data: " + orjson.dumps({"id": "b", "object": "chat.completion.chunk", **delta}) + b"\n\n"
        )
        usage = {"prompt_tokens": 1, "completion_tokens": shape.tokens, "total_tokens": shape.tokens + 1}
        self.usage = b"data: " + orjson.dumps({"id": "b", "choices": [], "usage": usage}) + b"\n\n"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] != "/v1/chat/completions":
            await send_bytes(send, 200, b"{}", [(b"content-type", b"application/json")])
            return
        body = orjson.loads(await read_body(receive, 1 << 20))
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await asyncio.sleep(self.shape.ttft_s)
        for i in range(self.shape.tokens):
            if i:
                await asyncio.sleep(self.shape.itl_s)
            await send({"type": "http.response.body", "body": self.frame, "more_body": True})
        tail = self.usage if (body.get("stream_options") or {}).get("include_usage") else b""
        await send({"type": "http.response.body", "body": tail + b"data: [DONE]\n\n", "more_body": False})


def _run_engine(port: int, shape: EngineShape) -> None:
    config = uvicorn.Config(
        FakeEngine(shape), port=port, http="httptools", loop="uvloop", lifespan="off", log_level="warning"
    )
    uvicorn.Server(config).run()


def _run_gateway(port: int, engine_port: int, transport: str) -> None:
    from gateway.app import build_app, build_gateway
    from gateway.proxy.upstream import UpstreamTransport
    from gateway.settings import Settings

    settings = Settings(
        port=port,
        backends=({"name": "fake", "url": f"http://127.0.0.1:{engine_port}"},),  # type: ignore[arg-type]
        pools=({"model": "bench", "backends": ("fake",)},),  # type: ignore[arg-type]
    )
    upstream: UpstreamTransport | None = None
    if transport == "httpx":
        from gateway.bench.transport import httpx_transport

        upstream = httpx_transport(settings.timeouts, settings.limits.connections)
    app = build_app(build_gateway(settings, transport=upstream))
    config = uvicorn.Config(
        app, port=port, http="httptools", loop="uvloop", lifespan="on", log_level="warning", access_log=False
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":  # pragma: no cover - run through `spark-gateway bench overhead`
    sys.exit("use: spark-gateway bench overhead")
