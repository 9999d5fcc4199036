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
engine are faulty at any time, so every request is servable, and each one ends as exactly one of:

- completed: 200 and the stream ends with `data: [DONE]` and no error frame;
- error (clear): a refusal with Retry-After (429/503), or a stream that started and then carried an
  error frame because its backend died under it (it cannot be replayed: tokens were already sent);
- lost: anything else (a 5xx without Retry-After, a dropped connection, a stream cut without [DONE]);
- hung: no end within the client's watchdog.
Bounded by the request count and by `--max-seconds` (requests not started by then are not sent).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from gateway.bench.engine_procs import EngineProcess, engine_processes
from gateway.bench.malformed import malformed, send_raw
from gateway.sim.engine import SimEngine
from gateway.sim.fleet import EngineSpec, FleetSpec
from gateway.sim.perf import DeviceSpec
from gateway.sim.runner import TwinFleet

MODEL = "soak-model"
STATE_DIR_ENV = "SPARK_GATEWAY_STATE_DIR"  # would override the config's `state_dir: null`
WATCHDOG_S = 60.0  # a request still open after this long is hung (gateway timeouts are far shorter)
TRACE_DIR_ENV = "SPARK_GATEWAY_SOAK_TRACE_DIR"  # set: the gateway subprocess runs under tracemalloc
TRACE_FRAMES = 8  # deep enough to see which structure a growing allocation belongs to
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
        fields = (
            *(
                "requests",
                "completed",
                "errors",
                "hung",
                "lost",
                "rss_start_mb",
                "rss_warm_mb",
                "rss_end_mb",
                "rss_growth_pct",
                "inflight_end",
                "traced_start_mb",
                "traced_warm_mb",
                "traced_end_mb",
            ),
            *("malformed", "malformed_wrong", "faults", "seconds", "kinds"),
        )
        print(json.dumps({"results": [{k: asdict(result)[k] for k in fields}]}))
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _gateway_config(urls: dict[str, str], port: int) -> dict[str, Any]:
    return {
        "host": "127.0.0.1",
        "port": port,
        "backends": [{"name": n, "url": u, "flavor": "vllm"} for n, u in urls.items()],
        "pools": [{"model": MODEL, "backends": list(urls)}],
        # A loaded loopback host answers probes and connects late: short timeouts would call it dead.
        "probe": {"interval_s": 0.5, "starting_interval_s": 0.25, "timeout_s": 3.0},
        # The first-token timeout covers a stream's wait in an engine's own queue (long with 1,000
        # streams on four engines); the idle gap only runs once tokens flow.
        "timeouts": {"connect_s": 3.0, "first_byte_s": 30.0, "idle_s": 5.0},
        "limits": {"max_attempts": len(urls), "connections": 4096},
        "queue": {"max_queue": 4096, "timeout_s": 30.0},
        "breaker": {"cooldown_s": 2.0},
        "shutdown": {"drain_timeout_s": 5.0},
        "state_dir": None,  # a bench keeps no state: nothing read from or written to the user's cache
    }


def traced_serve() -> None:
    """`spark-gateway serve` under tracemalloc (the --trace gateway): each SIGUSR1 writes the traced
    bytes and a snapshot to the trace directory, numbered in order."""
    import tracemalloc

    from gateway.cli import main

    tracemalloc.start(TRACE_FRAMES)
    out = Path(os.environ[TRACE_DIR_ENV])
    numbers = itertools.count()

    def dump(signum: int, frame: object) -> None:
        n = next(numbers)
        snapshot = tracemalloc.take_snapshot()
        current, _ = tracemalloc.get_traced_memory()
        snapshot.dump(str(out / f"snap-{n}.part"))
        (out / f"traced-{n}").write_text(str(current))
        (out / f"snap-{n}.part").rename(out / f"snap-{n}")  # last: the dump is complete

    signal.signal(signal.SIGUSR1, dump)
    raise SystemExit(main(sys.argv[1:]))


async def _trace_dump(pid: int, out: Path, n: int) -> float:
    """Ask the traced gateway for dump `n`; its traced MB once written."""
    os.kill(pid, signal.SIGUSR1)
    async with asyncio.timeout(120):
        while not (out / f"snap-{n}").exists():
            await asyncio.sleep(0.1)
    return round(int((out / f"traced-{n}").read_text()) / 2**20, 1)


def _print_growth(out: Path, top: int = 25) -> None:
    """The allocation sites that grew most from the dump after the warm-up batch to the one at the end,
    both with no request in flight: what the run left behind. To stderr (stdout stays JSON)."""
    import tracemalloc

    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    first = tracemalloc.Snapshot.load(str(out / "snap-0")).filter_traces(ignore)
    last = tracemalloc.Snapshot.load(str(out / "snap-2")).filter_traces(ignore)
    print("traced growth from after the warm-up batch to the end, by site:", file=sys.stderr)
    for stat in last.compare_to(first, "traceback")[:top]:
        frames = list(stat.traceback)[::-1]  # most recent first
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in frames[:5])
        print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  {where}", file=sys.stderr)


async def _settle(session: aiohttp.ClientSession, url: str, timeout: float = 30.0) -> int:
    """Until the gateway has no request in flight (a client that gave up may leave one running a while),
    so the end sample is what the run left behind, not work still under way; at most `timeout` s.
    The in-flight count last seen (-1: never read)."""
    inflight = -1
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            while inflight != 0:
                await asyncio.sleep(0.2)
                try:
                    async with session.get(url + "/gateway/backends") as response:
                        document = await response.json()
                    inflight = sum(b["inflight"] for b in document["backends"])
                except (aiohttp.ClientError, ValueError, KeyError, TypeError):
                    pass
    return inflight


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


async def wait_ready(
    session: aiohttp.ClientSession, url: str, process: subprocess.Popen[bytes], timeout: float = 30.0
) -> None:
    """Until the gateway subprocess at `url` answers /ready with 200; fails at once if it exits first."""
    async with asyncio.timeout(timeout):
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the gateway exited (code {process.returncode}) before it was ready")
            try:
                async with session.get(url + "/ready") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)


async def _one(session: aiohttp.ClientSession, url: str, rng: random.Random) -> tuple[str, str]:
    """(outcome, kind): the outcome as counted, and what exactly the client saw, for the breakdown."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "tell me a story " * rng.randint(1, 20)}],
        "max_tokens": rng.randint(8, 48),
        "stream": True,
    }
    try:
        async with asyncio.timeout(WATCHDOG_S):
            async with session.post(url + "/v1/chat/completions", json=body) as response:
                raw = await response.read()
                if response.status in (429, 503) and "retry-after" in response.headers:
                    return "errors", f"{response.status} {_code(raw)}{_causes(raw)}"
                if response.status != 200:
                    return "lost", f"{response.status} {_code(raw)}{_causes(raw)}"
                if b'"error"' in raw:
                    # the backend died mid-stream: an error frame, then the end
                    return "errors", "200 stream error frame"
                if raw.rstrip().endswith(b"data: [DONE]"):
                    return "completed", "200"
                return "lost", "200 stream cut without [DONE]"
    except TimeoutError:
        return "hung", "no end within the watchdog"
    except aiohttp.ClientError as exc:
        return "lost", f"{type(exc).__name__}: {str(exc)[:60]}"


def _code(raw: bytes) -> str:
    try:
        return str(json.loads(raw)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "?"


# How the gateway words each failed attempt ("e1: <why>") -> a short cause, for the breakdown.
_CAUSES = (
    ("ClientConnectorError", "refused"),
    ("circuit breaker open", "breaker open"),
    ("in time", "timeout"),
    ("first-token timeout", "timeout"),
    ("TimeoutError", "timeout"),
    ("Disconnected", "reset"),
    ("ClientOSError", "reset"),
    ("HTTP ", "5xx"),
)


def _causes(raw: bytes) -> str:
    """The causes of the failed attempts behind a gateway 5xx, e.g. " (refused, reset)": which failures
    left the request with no backend, so a lost request says why it was not waited for."""
    try:
        message = str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return ""
    if "no backend answered:" not in message:
        return ""
    attempts = message.split("no backend answered:", 1)[1].split(";")
    found = [next((cause for marker, cause in _CAUSES if marker in a), "other") for a in attempts]
    return f" ({', '.join(sorted(found))})"


class _Chaos:
    """Kills, hangs and restarts engines at random, never leaving fewer than one healthy."""

    def __init__(self, fleet: TwinFleet, rng: random.Random) -> None:
        self.fleet = fleet
        self.rng = rng
        self.faults = 0
        self._recoveries: set[asyncio.Task[None]] = set()

    def _healthy(self) -> list[SimEngine]:
        return [self.fleet.engine(n) for n in self.fleet.names if self.fleet.engine(n).phase == "ready"]

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.rng.uniform(0.5, 1.5))
            healthy = self._healthy()
            if len(healthy) < 2:
                continue
            engine = self.rng.choice(healthy)
            action = self.rng.choice(["crash", "hang", "restart"])
            self.faults += 1
            if action == "restart":
                await engine.restart()
                continue
            if action == "crash":
                await engine.crash()
            else:
                engine.hang()
            task = asyncio.create_task(self._recover(engine))
            self._recoveries.add(task)
            task.add_done_callback(self._recoveries.discard)

    async def _recover(self, engine: SimEngine) -> None:
        await asyncio.sleep(self.rng.uniform(1.0, 3.0))
        await engine.restart()

    async def stop(self) -> None:
        for task in list(self._recoveries):
            task.cancel()
        await asyncio.gather(*self._recoveries, return_exceptions=True)


async def _answers(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url + "/health") as response:
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


class _SignalChaos:
    """SIGKILLs (then restarts) or SIGSTOPs (then resumes) engine processes at random, never leaving
    fewer than one healthy."""

    def __init__(self, engines: dict[str, EngineProcess], rng: random.Random) -> None:
        self.engines = engines
        self.rng = rng
        self.faults = 0
        self._recoveries: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=1.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                await asyncio.sleep(self.rng.uniform(0.5, 1.5))
                await self._one_fault(session)

    async def _one_fault(self, session: aiohttp.ClientSession) -> None:
        # Ready by its own word, not by a guess: a restarted process on a busy host starts late.
        candidates = [e for e in self.engines.values() if e.healthy]
        answers = await asyncio.gather(*(_answers(session, e.url) for e in candidates))
        healthy = [e for e, ok in zip(candidates, answers, strict=True) if ok]
        if len(healthy) >= 2:
            engine = self.rng.choice(healthy)
            self.faults += 1
            if self.rng.random() < 0.5:
                await asyncio.to_thread(engine.kill)
                recovery = self._restart(engine, self.rng.uniform(1.0, 3.0))
            else:
                engine.stop()
                recovery = self._resume(engine, self.rng.uniform(1.0, 6.0))
            task = asyncio.create_task(recovery)
            self._recoveries.add(task)
            task.add_done_callback(self._recoveries.discard)

    async def _restart(self, engine: EngineProcess, after: float) -> None:
        await asyncio.sleep(after)
        engine.start()  # on the same port; it warms up again before it is ready

    async def _resume(self, engine: EngineProcess, after: float) -> None:
        await asyncio.sleep(after)
        engine.resume()

    async def stop(self) -> None:
        for task in list(self._recoveries):
            task.cancel()
        await asyncio.gather(*self._recoveries, return_exceptions=True)
        for engine in self.engines.values():
            if engine.stopped:
                engine.resume()


async def soak(args: argparse.Namespace) -> SoakResult:
    rng = random.Random(args.seed)
    if args.signals:
        names = [f"e{i}" for i in range(args.engines)]
        ports = [_free_port() for _ in names]
        async with engine_processes(names, ports, MODEL, args.time_scale, warmup_s=100.0) as engines:
            urls = {name: engine.url for name, engine in engines.items()}
            return await _with_gateway(args, urls, _SignalChaos(engines, rng), rng)
    async with TwinFleet(_fleet(args.engines), time_scale=args.time_scale, ephemeral_ports=True) as fleet:
        await fleet.wait_ready(30)
        urls = {name: fleet.url(name) for name in fleet.names}
        return await _with_gateway(args, urls, _Chaos(fleet, rng), rng)


async def _with_gateway(
    args: argparse.Namespace, urls: dict[str, str], chaos: _Chaos | _SignalChaos, rng: random.Random
) -> SoakResult:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        config = Path(tmp) / "gateway.yaml"
        config.write_text(yaml.safe_dump(_gateway_config(urls, port)))
        trace = Path(tmp) if args.trace else None
        launcher = ["-c", "from gateway.bench.soak import traced_serve; traced_serve()"]
        command = [
            sys.executable,
            *(launcher if trace else ["-m", "gateway"]),
            "serve",
            "--config",
            str(config),
            "--log-level",
            "error",
        ]
        env = {k: v for k, v in os.environ.items() if k != STATE_DIR_ENV}  # nor from the shell's
        env["PYTHONUNBUFFERED"] = "1"
        if trace:
            env[TRACE_DIR_ENV] = str(trace)
        process = subprocess.Popen(command, env=env)
        try:
            return await _drive(args, chaos, url, process, rng, trace)
        finally:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


async def _drive(
    args: argparse.Namespace,
    chaos: _Chaos | _SignalChaos,
    url: str,
    process: subprocess.Popen[bytes],
    rng: random.Random,
    trace: Path | None,
) -> SoakResult:
    connector = aiohttp.TCPConnector(limit=args.streams)
    async with aiohttp.ClientSession(connector=connector) as session:
        await wait_ready(session, url, process)
        warm = await asyncio.gather(*(_one(session, url, rng) for _ in range(min(200, args.streams))))
        if Counter(outcome for outcome, _ in warm)["completed"] != len(warm):
            raise RuntimeError(f"warm-up requests failed before any fault: {Counter(warm)}")
        rss_start = _rss_mb(process.pid)
        traced_start = await _trace_dump(process.pid, trace, 0) if trace else None
        host, port = url.removeprefix("http://").split(":")
        bad = malformed(MODEL, 1000, rng)
        chaos_task = asyncio.create_task(chaos.run())
        started = time.monotonic()
        outcomes: Counter[str] = Counter()
        kinds: Counter[str] = Counter()
        gate = asyncio.Semaphore(args.streams)

        async def guarded() -> None:
            async with gate:
                if time.monotonic() - started >= args.max_seconds:
                    return
                if rng.random() < args.malformed:
                    name, raw = bad[outcomes["malformed"] % len(bad)]
                    answer = await send_raw(host, int(port), raw, timeout=WATCHDOG_S)
                    outcomes["malformed"] += 1
                    if not (400 <= answer.status < 500 and answer.json_error):
                        outcomes["malformed_wrong"] += 1
                        kinds[f"malformed answered {answer.status}: {name}"] += 1
                    return
                outcome, kind = await _one(session, url, rng)
                outcomes[outcome] += 1
                kinds[f"{outcome}: {kind}"] += 1

        def progress() -> float:
            done = sum(outcomes[k] for k in ("completed", "errors", "hung", "lost", "malformed"))
            elapsed = time.monotonic() - started
            return max(done / int(args.requests), elapsed / float(args.max_seconds))

        async def warm_sample() -> tuple[float, float | None]:
            while progress() < WARM_SHARE:
                await asyncio.sleep(0.1)
            rss = _rss_mb(process.pid)
            return rss, (await _trace_dump(process.pid, trace, 1) if trace else None)

        warm_task = asyncio.create_task(warm_sample())
        try:
            await asyncio.gather(*(guarded() for _ in range(args.requests)))
            rss_warm, traced_warm = await warm_task
        finally:
            warm_task.cancel()
            chaos_task.cancel()
            await asyncio.gather(chaos_task, warm_task, return_exceptions=True)
            await chaos.stop()
        seconds = time.monotonic() - started
        inflight_end = await _settle(session, url)
        rss_end = _rss_mb(process.pid)
        traced_end = await _trace_dump(process.pid, trace, 2) if trace else None
        if trace:
            _print_growth(trace)
    served = ("completed", "errors", "hung", "lost")
    return SoakResult(
        requests=sum(outcomes[key] for key in served),
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
        faults=chaos.faults,
        seconds=round(seconds, 1),
        kinds=dict(kinds.most_common()),
    )
