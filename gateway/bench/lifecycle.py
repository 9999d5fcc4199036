"""`spark-gateway bench lifecycle`: which engines are resident over a day of shifting demand on one Spark
where three engines cannot all be (bench/lifecycle_day.py), replayed through the product's engine
manager on simulated time (bench/lifecycle_run.py) under three strategies: pinned, LRU swapping as
llama-swap does it, and the gateway's own lifecycle with its defaults; and under two ways clients wait
for an engine that is not ready (told to come back with Retry-After, or held in the gateway), the same
for every strategy of a table. Each round is its own day (seed); the tables give the median and
[min-max] over the rounds."""

from __future__ import annotations

import argparse
import logging
import statistics
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from gateway.bench.lifecycle_day import trace
from gateway.bench.lifecycle_run import CLIENTS, STRATEGIES, Result, run_day

Variant = tuple[str, str, dict[str, Any]]  # (row label, strategy, engine_control overrides)


def variants(batch_waits: Sequence[float] = ()) -> list[Variant]:
    rows: list[Variant] = [(s, s, {}) for s in STRATEGIES]
    rows += [(f"cost-aware, batch {b:g}s", "cost-aware", {"batch_wait_s": b}) for b in batch_waits]
    return rows


def _one(job: tuple[Variant, str, int]) -> tuple[str, str, Result]:
    (label, strategy, control), clients, seed = job
    # A swap storm logs a line per refused start; the table says it. Restored after: in-process (one
    # worker) the caller's logging must come back as it was.
    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        return clients, label, run_day(strategy, seed, trace(seed), control or None, clients=clients)
    finally:
        logging.disable(before)


Results = dict[str, dict[str, list[Result]]]  # clients -> row label -> one result per round


def rounds(
    repeats: int, seed: int, rows: Sequence[Variant], workers: int = 1, clients: Sequence[str] = CLIENTS
) -> Results:
    """Every row over the same `repeats` days for each way clients wait, in `workers` processes (each
    day runs alone on its loop)."""
    jobs = [(row, c, seed + i) for c in clients for i in range(repeats) for row in rows]
    out: Results = {c: {label: [] for label, _, _ in rows} for c in clients}
    done: Iterator[tuple[str, str, Result]]
    if workers <= 1:
        done = map(_one, jobs)
    else:
        pool = ProcessPoolExecutor(workers)
        done = pool.map(_one, jobs)
    try:
        for c, label, result in done:
            out[c][label].append(result)
    finally:
        if workers > 1:
            pool.shutdown()
    return out


def _spread(values: list[float], fmt: Callable[[float], str]) -> str:
    return f"{fmt(statistics.median(values))} [{fmt(min(values))}-{fmt(max(values))}]"


COLUMNS: tuple[tuple[str, Callable[[Result], float], Callable[[float], str]], ...] = (
    ("client wait (h)", lambda r: r.waited_s / 3600, lambda v: f"{v:.1f}"),
    ("swaps", lambda r: r.swaps, lambda v: f"{v:.0f}"),
    ("goodput (served <= 60 s)", lambda r: r.goodput * 100, lambda v: f"{v:.1f}%"),
    ("503/429 answers", lambda r: r.refusals, lambda v: f"{v:.0f}"),
    ("not served", lambda r: r.not_served + r.gave_up, lambda v: f"{v:.0f}"),
    ("peak GiB", lambda r: r.peak_gib, lambda v: f"{v:.0f}"),
    ("overruns", lambda r: r.overruns, lambda v: f"{v:.0f}"),
    ("busy evictions", lambda r: r.busy_evictions, lambda v: f"{v:.0f}"),
)


CLIENT_TITLES = {
    "retry": "Clients told to come back: a request for an engine not ready waits 30 s (the gateway's "
    "default), then gets 503 with the warm-up's ETA as Retry-After and comes back then",
    "held": "Clients held: a request for an engine not ready waits in the gateway until it is ready "
    "(queue.warming_wait_s: 3600), as llama-swap holds it",
}


def report(results: Results) -> list[str]:
    lines: list[str] = []
    for clients, table in results.items():
        if lines:
            lines.append("")
        lines += [f"{CLIENT_TITLES[clients]}:", ""]
        lines += _table(table)
    return lines


def _table(results: dict[str, list[Result]]) -> list[str]:
    lines = [
        "| strategy | " + " | ".join(name for name, _, _ in COLUMNS) + " |",
        "|---|" + "---:|" * len(COLUMNS),
    ]
    for label, rs in results.items():
        cells = [_spread([get(r) for r in rs], fmt) for _, get, fmt in COLUMNS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lru = [r.waited_s for r in results.get("lru", [])]
    for label, rs in results.items():
        if not label.startswith("cost-aware") or not lru:
            continue
        cuts = [1 - r.waited_s / b for b, r in zip(lru, rs, strict=True) if b > 0]
        if cuts:
            cut = _spread([c * 100 for c in cuts], lambda v: f"{v:.0f}%")
            lines.append(f"{label} cuts client waiting vs lru by {cut} (median [min-max] over the rounds)")
        if len(lru) == len(rs):
            less = 1 - statistics.median(r.waited_s for r in rs) / statistics.median(lru)
            lines.append(f"{label} against lru, median day against median day: {less:.0%} less waiting")
    return lines


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "lifecycle", help="engine swapping over a simulated day through the engine manager"
    )
    parser.add_argument("--repeats", type=int, default=7, help="rounds, each its own day (default 7)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="processes running the days (default 2)")
    parser.add_argument(
        "--batch-wait",
        type=float,
        action="append",
        default=[],
        metavar="S",
        help="also run cost-aware with engine_control.batch_wait_s = S (repeatable)",
    )
    parser.add_argument(
        "--clients",
        choices=CLIENTS,
        action="append",
        default=[],
        help="how a request for an engine not ready waits (repeatable; default: both, a table each)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    rows = variants(args.batch_wait)
    clients = args.clients or list(CLIENTS)
    for line in report(rounds(args.repeats, args.seed, rows, args.workers, clients)):
        print(line)
    return 0
