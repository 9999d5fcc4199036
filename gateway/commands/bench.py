"""`spark-gateway bench KIND`: benchmarks that print ratios measured side by side in one run.

Each benchmark is a module under gateway/bench/ exposing `register(subparsers) -> None`, discovered like
the top-level commands. Modules whose name starts with an underscore are skipped: they hold a benchmark's
own tools (packages outside the runtime dependencies, such as httpx), imported only when it runs, so the
command line starts on a plain `pip install .`.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from typing import Any

from gateway import bench


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("bench", help="run a benchmark")
    kinds = parser.add_subparsers(dest="bench", required=True, metavar="KIND")
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{bench.__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(kinds)
