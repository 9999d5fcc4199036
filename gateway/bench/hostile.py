"""`spark-gateway bench hostile {stall,mix}`: what hostile input costs everybody else.

Loopback only. Twin engines run in this process; the gateway runs as a `spark-gateway serve` subprocess
(its resident memory measured from /proc), with `--limit KEY=VALUE` overriding its `limits:` settings.

- `stall`: one stream is relayed while `--parallel` bodies of `--messages` tiny messages (1,000,000: a
  30 MB body) are posted. Prints the stream's longest gap between two chunks before and during the posts,
  the posts' statuses and times, and the gateway's RSS before, at its peak and after. With the default
  `max_messages` the body is refused; `--limit max_messages=2000000` measures the parse of all of it.
  `--limit parse_offload_bytes=1073741824` parses every body inline with orjson, as the gateway did
  before api/body_parse.py.
- `arrays`: a completions body of `--ids-mb` MB of token ids and a chat body carrying an unknown array of
  `--unknown-mb` MB of zeros. Each is posted alone first: its status, time and the gateway's CPU time for
  it. Then `--legit` legitimate requests at `--rate` per second run alone ("clean") and with one huge body
  posted every `--every` seconds ("hostile"): their p99 each, and the ratio.
- `mix`: `--legit` legitimate requests at `--rate` per second, alone ("clean") and with `--bad` malformed
  ones of 20 kinds (gateway/bench/malformed.py) interleaved ("mixed"), in `--rounds` rounds of one run
  each, the order swapped every round. Prints each run's p50 and p99 latency of the legitimate requests,
  the gateway's CPU time per legitimate request and the machine's load when the run began; per mode the
  median and spread (min-max) over the rounds; and mixed against clean, the ratio of the medians beside
  each round's own ratio. `loaded` says a run began with more runnable work than cores: its figures
  measured the other jobs too.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from gateway.bench.gateway_proc import gateway_process, rss_mb
from gateway.bench.malformed import malformed, send_raw
from gateway.sim.fleet import EngineSpec, FleetSpec
from gateway.sim.perf import DeviceSpec
from gateway.sim.runner import TwinFleet

MODEL = "hostile-model"


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "hostile", help="what a huge body or malformed requests cost the other requests"
    )
    modes = parser.add_subparsers(dest="mode", required=True)
    stall = modes.add_parser("stall", help="one stream's chunk gaps while huge bodies are posted")
    stall.add_argument("--messages", type=int, default=1_000_000, help="tiny messages per body")
    stall.add_argument("--parallel", type=int, default=1, help="bodies posted at once")
    arrays = modes.add_parser("arrays", help="CPU of huge arrays, and legitimate p99 while they arrive")
    arrays.add_argument("--ids-mb", type=float, default=10.0, help="completions body of token ids, MB")
    arrays.add_argument("--unknown-mb", type=float, default=30.0, help="chat body's unknown array, MB")
    arrays.add_argument("--legit", type=int, default=400)
    arrays.add_argument("--rate", type=float, default=40.0, help="legitimate requests per second")
    arrays.add_argument("--every", type=float, default=1.0, help="seconds between two huge bodies")
    mix = modes.add_parser("mix", help="legitimate p99 with and without malformed requests")
    mix.add_argument("--legit", type=int, default=1000)
    mix.add_argument("--bad", type=int, default=100)
    mix.add_argument("--rate", type=float, default=40.0, help="legitimate requests per second")
    mix.add_argument("--rounds", type=int, default=4, help="rounds of one clean and one mixed run")
    for sub in (stall, arrays, mix):
        sub.add_argument("--limit", action="append", default=[], metavar="KEY=VALUE", help="gateway limits")
        sub.add_argument("--seed", type=int, default=0)
        sub.add_argument("--json", action="store_true")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    modes = {"stall": stall, "arrays": huge_arrays, "mix": mix}
    result = asyncio.run(modes[args.mode](args))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>22}: {value}")
    return 0


def _limits(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        out[key.strip()] = yaml.safe_load(value)
    return out


def _fleet(names: list[str]) -> FleetSpec:
    return FleetSpec(
        name="hostile",
        devices={name: DeviceSpec() for name in names},
        engines=[EngineSpec(name=n, served_model_name=MODEL, device=n, seed=i) for i, n in enumerate(names)],
    )


@asynccontextmanager
async def _gateway(
    fleet: TwinFleet, limits: dict[str, Any]
) -> AsyncIterator[tuple[str, subprocess.Popen[bytes], aiohttp.ClientSession]]:
    config = {
        "backends": [{"name": n, "url": fleet.url(n), "flavor": "vllm"} for n in fleet.names],
        "pools": [{"model": MODEL, "backends": list(fleet.names)}],
        "limits": limits,
        "state_dir": None,
    }
    async with (
        gateway_process(config) as gateway,
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=2000), timeout=aiohttp.ClientTimeout(total=120)
        ) as session,
    ):
        yield gateway.url, gateway.process, session


class _RssPeak:
    """Samples a process's RSS every 20 ms from a thread (the loop may be the thing that is stalled)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_mb(self.pid))

    def __enter__(self) -> _RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def _stream_chunks(
    session: aiohttp.ClientSession, url: str, times: list[list[float]], stop: asyncio.Event
) -> None:
    """Streams one long answer after another until `stop`; each stream's chunk arrival times apart."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "go"}],
        "max_tokens": 4000,
        "stream": True,
    }
    while not stop.is_set():
        arrivals: list[float] = []
        times.append(arrivals)
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            async for _ in response.content.iter_any():
                arrivals.append(time.monotonic())
                if stop.is_set():
                    return


def _max_gap(times: list[list[float]], start: float, end: float) -> float:
    gaps = [b - a for stream in times for a, b in zip(stream, stream[1:], strict=False) if start <= b <= end]
    return round(max(gaps, default=0.0) * 1000, 1)


def _post(url: str, body: bytes, path: str = "/v1/chat/completions") -> tuple[int, float]:
    """POST from a thread with a blocking client: sending 30 MB must not stall this process's loop, which
    runs the twin engine and reads the stream being measured."""
    host, port = url.removeprefix("http://").split(":")
    began = time.monotonic()
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        connection.request("POST", path, body, {"content-type": "application/json"})
        response = connection.getresponse()
        response.read()
        return response.status, round(time.monotonic() - began, 2)
    finally:
        connection.close()


async def stall(args: argparse.Namespace) -> dict[str, Any]:
    messages = [{"role": "user", "content": "x"}] * args.messages
    # A model no pool serves: read, parsed and checked in full, then refused (404) before routing, so no
    # engine parses it (the twin runs in this process: its work would stall the stream measured).
    big = orjson.dumps({"model": "no-such-model", "messages": messages, "max_tokens": 4})
    del messages
    async with TwinFleet(_fleet(["e0"]), time_scale=20.0, ephemeral_ports=True) as fleet:
        await fleet.wait_ready(30)
        async with _gateway(fleet, _limits(args.limit)) as (url, process, session):
            times: list[list[float]] = []
            stop = asyncio.Event()
            streamer = asyncio.create_task(_stream_chunks(session, url, times, stop))
            await asyncio.sleep(2.0)
            rss_before = rss_mb(process.pid)
            posted = time.monotonic()

            with _RssPeak(process.pid) as peak:
                posts = (asyncio.to_thread(_post, url, big) for _ in range(args.parallel))
                answers = await asyncio.gather(*posts)
                done = time.monotonic()
                await asyncio.sleep(0.5)
            stop.set()
            await asyncio.gather(streamer, return_exceptions=True)
            rss_after = rss_mb(process.pid)
    return {
        "body_mb": round(len(big) / 1e6, 1),
        "parallel": args.parallel,
        "limits": _limits(args.limit),
        "statuses": dict(Counter(status for status, _ in answers)),
        "post_seconds": [seconds for _, seconds in answers],
        "gap_before_ms": _max_gap(times, posted - 1.5, posted),
        "gap_during_ms": _max_gap(times, posted, done + 0.5),
        "rss_before_mb": rss_before,
        "rss_peak_mb": max(peak.peak, rss_before),
        "rss_after_mb": rss_after,
    }


def _huge_bodies(ids_mb: float, unknown_mb: float) -> list[tuple[str, bytes]]:
    """(path, body): token ids as a completions prompt, and a chat request with an unknown array."""
    ids = b",".join(b"%d" % (10_000 + i % 90_000) for i in range(int(ids_mb * 1e6 / 6)))
    prompt = b'{"model":"' + MODEL.encode() + b'","max_tokens":4,"prompt":[' + ids + b"]}"
    zeros = b",".join([b"0"] * int(unknown_mb * 1e6 / 2))
    chat = orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    return [("/v1/completions", prompt), ("/v1/chat/completions", chat[:-1] + b',"extra":[' + zeros + b"]}")]


# The poster of huge bodies runs as a process of its own: sending 30 MB from a thread of this process would
# take the GIL from the twin engines and the legitimate client, whose latency is what is measured.
_POSTER = """
import http.client, sys, time
host, port, every, files = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
bodies = [(f.split("@", 1)[0], open(f.split("@", 1)[1], "rb").read()) for f in files]
posted = 0
while True:
    path, body = bodies[posted % len(bodies)]
    began = time.monotonic()
    connection = http.client.HTTPConnection(host, port, timeout=120)
    connection.request("POST", path, body, {"content-type": "application/json"})
    connection.getresponse().read()
    connection.close()
    posted += 1
    print(posted, flush=True)
    time.sleep(max(0.0, began + every - time.monotonic()))
"""


@asynccontextmanager
async def _hostile_poster(
    url: str, bodies: list[tuple[str, bytes]], every: float
) -> AsyncIterator[list[int]]:
    """A process posting one huge body every `every` seconds, the kinds in turn, while the block runs;
    the list holds how many it posted once the block is over."""
    host, port = url.removeprefix("http://").split(":")
    with tempfile.TemporaryDirectory() as folder:
        files = []
        for n, (path, body) in enumerate(bodies):
            (Path(folder) / str(n)).write_bytes(body)
            files.append(f"{path}@{Path(folder) / str(n)}")
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _POSTER, host, port, str(every), *files, stdout=subprocess.PIPE
        )
        posted: list[int] = []
        try:
            yield posted
        finally:
            process.kill()
            out, _ = await process.communicate()
            posted.append(len(out.split()))


async def huge_arrays(args: argparse.Namespace) -> dict[str, Any]:
    bodies = _huge_bodies(args.ids_mb, args.unknown_mb)
    async with TwinFleet(_fleet(["e0", "e1"]), time_scale=50.0, ephemeral_ports=True) as fleet:
        await fleet.wait_ready(30)
        async with _gateway(fleet, _limits(args.limit)) as (url, process, session):
            gateway = (url, process.pid)
            await _round(session, gateway, argparse.Namespace(legit=100, rate=args.rate), [])  # warm-up
            alone: dict[str, Any] = {}
            for path, body in bodies:
                cpu_before = _cpu_s(process.pid)
                status, seconds = await asyncio.to_thread(_post, url, body, path)
                cpu = round(_cpu_s(process.pid) - cpu_before, 3)
                alone[path] = {"mb": round(len(body) / 1e6, 1), "status": status, "s": seconds, "cpu_s": cpu}
            clean = await _round(session, gateway, args, [])
            async with _hostile_poster(url, bodies, args.every) as posted:
                hostile = await _round(session, gateway, args, [])
    return {
        "alone": alone,
        "clean_p99_ms": clean["p99_ms"],
        "hostile_p99_ms": hostile["p99_ms"],
        "p99_ratio": round(hostile["p99_ms"] / clean["p99_ms"], 2) if clean["p99_ms"] else None,
        "huge_posted": posted[0],
        "legit_ok": {"clean": clean["ok"], "hostile": hostile["ok"], "of": args.legit},
        "load1": {"clean": clean["load1"], "hostile": hostile["load1"], "cores": os.cpu_count()},
    }


async def _legit(session: aiohttp.ClientSession, url: str, i: int) -> tuple[bool, float]:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"q {i}"}],
        "max_tokens": 8,
        "stream": i % 2 == 0,
    }
    began = time.monotonic()
    async with session.post(url + "/v1/chat/completions", json=body) as response:
        raw = await response.read()
    return response.status == 200 and b'"error"' not in raw, time.monotonic() - began


async def _round(
    session: aiohttp.ClientSession,
    gateway: tuple[str, int],
    args: argparse.Namespace,
    bad: list[tuple[str, bytes]],
) -> dict[str, Any]:
    """One run: `args.legit` legitimate requests at `args.rate` per second, one malformed one after every
    tenth when `bad` holds some. The legitimate latencies, the gateway's CPU time per legitimate request,
    and the machine's load when the run began (a run on a loaded box is noise, and says so)."""
    url, pid = gateway
    host, port = url.removeprefix("http://").split(":")
    every = max(1, args.legit // len(bad)) if bad else 0
    legit: list[asyncio.Task[tuple[bool, float]]] = []
    hostile: list[asyncio.Task[Any]] = []
    load_before, cpu_before = os.getloadavg()[0], _cpu_s(pid)
    started = time.monotonic()
    for i in range(args.legit):
        await asyncio.sleep(max(0.0, started + i / args.rate - time.monotonic()))
        legit.append(asyncio.create_task(_legit(session, url, i)))
        if every and i % every == every - 1 and i // every < len(bad):
            hostile.append(asyncio.create_task(send_raw(host, int(port), bad[i // every][1])))
    results = await asyncio.gather(*legit)
    answers = await asyncio.gather(*hostile)
    seconds = sorted(s for _, s in results)
    return {
        "ok": sum(ok for ok, _ in results),
        "p50_ms": round(statistics.median(seconds) * 1000, 1),
        "p99_ms": round(seconds[int(0.99 * (len(seconds) - 1))] * 1000, 1),
        "gateway_cpu_ms": round((_cpu_s(pid) - cpu_before) / args.legit * 1000, 3),  # per legitimate one
        "load1": round(load_before, 2),
        "bad_4xx_json": sum(1 for a in answers if 400 <= a.status < 500 and a.json_error),
        "bad_5xx": sum(1 for a in answers if a.status >= 500),
    }


def _cpu_s(pid: int) -> float:
    """A process's CPU time (user + system) so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _summary(runs: list[dict[str, Any]], key: str) -> dict[str, float]:
    values = [run[key] for run in runs]
    return {"median": round(statistics.median(values), 2), "min": min(values), "max": max(values)}


def _ratios(clean: list[dict[str, Any]], hostile: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Mixed against clean for `key`: the ratio of the medians over the rounds, and each round's own ratio
    (its two runs side by side, so a load that drifts over the rounds hits both alike)."""
    pairs = sorted(round(h[key] / c[key], 2) for c, h in zip(clean, hostile, strict=True) if c[key])
    medians = _summary(hostile, key)["median"] / _summary(clean, key)["median"]
    middle = round(statistics.median(pairs), 2) if pairs else None
    return {"of_medians": round(medians, 2), "per_round": pairs, "per_round_median": middle}


async def mix(args: argparse.Namespace) -> dict[str, Any]:
    """Clean and mixed runs in rounds, the order swapped every round (clean first, then mixed first: ABBA
    ...), so neither mode always runs on the warmer or the quieter side of a round."""
    rng = random.Random(args.seed)
    async with TwinFleet(_fleet(["e0", "e1"]), time_scale=50.0, ephemeral_ports=True) as fleet:
        await fleet.wait_ready(30)
        async with _gateway(fleet, _limits(args.limit)) as (url, process, session):
            gateway = (url, process.pid)
            await _round(session, gateway, argparse.Namespace(legit=100, rate=args.rate), [])  # warm-up
            runs: dict[str, list[dict[str, Any]]] = {"clean": [], "mixed": []}
            for n in range(args.rounds):
                for position, mode in enumerate(("clean", "mixed") if n % 2 == 0 else ("mixed", "clean")):
                    bad = malformed(MODEL, args.bad, rng) if mode == "mixed" else []
                    run = await _round(session, gateway, args, bad)
                    runs[mode].append({"round": n, "position": position, **run})
    clean, mixed = runs["clean"], runs["mixed"]
    loads = [run["load1"] for run in clean + mixed]
    return {
        "clean_runs": clean,
        "mixed_runs": mixed,
        "p50_ms": {"clean": _summary(clean, "p50_ms"), "mixed": _summary(mixed, "p50_ms")},
        "p99_ms": {"clean": _summary(clean, "p99_ms"), "mixed": _summary(mixed, "p99_ms")},
        "p99_ratio": _ratios(clean, mixed, "p99_ms"),
        "gateway_cpu_ms_ratio": _ratios(clean, mixed, "gateway_cpu_ms"),
        "load1": {"median": round(statistics.median(loads), 2), "max": max(loads), "cores": os.cpu_count()},
        # A run begun with more runnable work than cores measured the other jobs as much as the gateway.
        "loaded": max(loads) > (os.cpu_count() or 1),
        "bad_4xx_json": sum(run["bad_4xx_json"] for run in mixed),
        "bad_sent": args.bad * args.rounds,
        "bad_5xx": sum(run["bad_5xx"] for run in mixed),
    }
