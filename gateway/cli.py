"""The `spark-gateway` command line.

Each subcommand lives in its own module under gateway/commands/ and exposes
`register(subparsers) -> None`, which adds its parser and sets `handler` (a callable taking the parsed
namespace and returning an exit code). Commands are discovered, so adding one touches no shared file.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from collections.abc import Sequence

from gateway import __version__, commands


def build_parser() -> argparse.ArgumentParser:
    summary = __doc__.splitlines()[0] if __doc__ else None
    parser = argparse.ArgumentParser(prog="spark-gateway", description=summary)
    parser.add_argument("--version", action="version", version=f"spark-gateway {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.handler(args)
    return result
