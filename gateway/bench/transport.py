"""`spark-gateway bench transport [--json]`: the same overhead measurement with the gateway's upstream
client swapped, aiohttp (the production transport) vs httpx, at a few concurrency levels. The figures
behind the choice are recorded in docs/transport.md.

httpx is not a runtime dependency (the gateway serves with aiohttp): it comes with the `bench` extra and
is imported only when a benchmark that measures it runs, so a plain `pip install .` still starts.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

import orjson

from gateway.bench.overhead import EngineShape, measure, render
from gateway.proxy.upstream import UpstreamTransport
from gateway.settings import Timeouts

BENCH_INSTALL = "pip install 'spark-gateway[bench]'"


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("transport", help="aiohttp vs httpx upstream")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--concurrency", default="1,16,64,256")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    missing = httpx_missing("bench transport")
    if missing:
        print(missing, file=sys.stderr)
        return 2
    levels = [int(c) for c in args.concurrency.split(",")]
    shape = EngineShape()
    results = {name: measure(levels, shape, args.seconds, name) for name in ("aiohttp", "httpx")}
    if args.json:
        print(orjson.dumps({name: [r.__dict__ for r in levels] for name, levels in results.items()}).decode())
    else:
        print("\n\n".join(render(levels, shape, name) for name, levels in results.items()))
    return 0


def httpx_missing(command: str) -> str | None:
    """The one-line error for a benchmark that needs httpx where it is not installed, else None.

    Checked in the command's own process before any worker starts: the httpx transport is built in a
    spawned gateway process, where a missing module would only show as a traceback and a stalled run.
    """
    try:
        importlib.import_module("httpx")  # about to be used anyway: importing it now costs nothing extra
    except ModuleNotFoundError:
        return f"spark-gateway {command} needs httpx, a benchmark-only tool: {BENCH_INSTALL}"
    return None


def httpx_transport(timeouts: Timeouts, connections: int) -> UpstreamTransport:
    """The httpx transport with the same pool size and timeouts as aiohttp's; imports httpx now."""
    from gateway.bench._httpx_transport import HttpxTransport

    return HttpxTransport(timeouts, connections)
