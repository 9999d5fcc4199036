"""The soak's memory figures: the gateway's resident memory at three points of a run, and with `--trace`
the gateway under tracemalloc (8 frames; several times slower: for finding what grows, not for timing):
its traced bytes at the same points and the allocation sites that grew, on stderr.

The end sample is taken once the gateway reports no request in flight (`settle`), so it is what the run
left behind, not work still under way.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import sys
from pathlib import Path

import aiohttp

TRACE_DIR_ENV = "SPARK_GATEWAY_SOAK_TRACE_DIR"  # set: the gateway subprocess runs under tracemalloc
TRACE_FRAMES = 8  # deep enough to see which structure a growing allocation belongs to
# How the traced gateway is started, in place of `-m gateway`.
TRACED_LAUNCHER = ("-c", "from gateway.bench.soak_memory import traced_serve; traced_serve()")


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


async def trace_dump(pid: int, out: Path, n: int) -> float:
    """Ask the traced gateway for dump `n`; its traced MB once written."""
    os.kill(pid, signal.SIGUSR1)
    async with asyncio.timeout(120):
        while not (out / f"snap-{n}").exists():
            await asyncio.sleep(0.1)
    return round(int((out / f"traced-{n}").read_text()) / 2**20, 1)


def print_growth(out: Path, top: int = 25) -> None:
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


async def settle(session: aiohttp.ClientSession, url: str, timeout: float = 30.0) -> int:
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
