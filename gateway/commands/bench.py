"""`spark-gateway bench KIND`: benchmarks that print ratios measured side by side in one run.

Each benchmark is a module under gateway/bench/ exposing `register(subparsers) -> None`, discovered like
the top-level commands. Modules whose name starts with an underscore are skipped: they hold a benchmark's
own tools (packages outside the runtime dependencies, such as httpx), imported only when it runs, so the
command line starts on a plain `pip install .`.

The benchmark modules import most of the gateway and the twin, so they are imported only when `bench` is
the command: the top-level parser hands everything after `bench` to a parser of its own (`bench_parser`),
and `spark-gateway --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from typing import Any

HELP = "run a benchmark"


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("bench", help=HELP, add_help=False)
    # The arguments after `bench`, `--help` among them, go to bench_parser (gateway/cli.py passes them).
    parser.set_defaults(handler=run, passthrough=True)


def bench_parser() -> argparse.ArgumentParser:
    """`spark-gateway bench`'s own parser: one subcommand per module of gateway/bench/."""
    from gateway import bench

    parser = argparse.ArgumentParser(prog="spark-gateway bench", description=HELP)
    kinds = parser.add_subparsers(dest="bench", required=True, metavar="KIND")
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{bench.__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(kinds)
    return parser


def run(args: argparse.Namespace) -> int:
    bench_args = bench_parser().parse_args(args.passthrough_args)
    result: int = bench_args.handler(bench_args)
    return result
