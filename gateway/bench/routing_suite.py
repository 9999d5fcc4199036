"""Several fleets in one `bench routing` run: what each replays, and worker processes to run them.

A fleet entry is a fleet file with, optionally, its own trace and a time scale (a content fleet wants its
content trace; a time scale runs that fleet on the wall clock, the twin that many times faster, instead of
the virtual clock):

    deploy/fleets/spark-pair-spec-content.yaml,trace=deploy/traces/mixed-content.yaml
    deploy/fleets/h100-inverted.yaml,time-scale=20

On the virtual clock (bench/virtual_time.py) a replay's figures do not depend on the machine: a busy
one makes the run take longer, not read slower. So fleets run side by side in worker processes (`--jobs`)
as the cores allow. On the wall clock a replay spends most of its time waiting for the twin (it keeps
about a third of a core busy at x50), and every replay samples its loop's lateness: if side-by-side
fleets (or anything else on the machine) crowd each other, the loop-lag figures, the warning and the
summary's late replays say so.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path

from gateway.bench.routing_report import StrategyResult


class EntryError(ValueError):
    """A fleet entry that cannot be read (`--fleets FILE[,trace=FILE][,time-scale=X]`)."""


@dataclass(frozen=True)
class FleetJob:
    """One fleet to bench: its file, its trace file (None: the built-in trace), its time scale (None: a
    virtual clock)."""

    fleet: Path
    trace: Path | None
    time_scale: float | None
    repeats: int
    split_budget: int
    progress: bool = True  # a per-request progress bar (off in worker processes: bars would interleave)
    position: int = 0  # its place on the command line: the summary keeps that order
    strategies: tuple[str, ...] = ()  # the strategies replayed; () for all
    charge: bool = False  # each decision's thread CPU time moves the virtual clock on
    decisions: Path | None = None  # a folder to write each replay's decisions to (JSON lines)


@dataclass(frozen=True)
class FleetReport:
    """What one fleet's bench gives back: every round's replays, the oracles found, its table."""

    job: FleetJob
    trace_name: str
    results: list[StrategyResult]
    oracles: dict[str, str]
    table: str  # routing_report.render's per-fleet table
    wall_s: float  # wall time of the whole fleet: searches and rounds
    replays: int  # replays run, searches included
    simulated_s: float = 0.0  # simulated seconds of those replays
    replaying_s: float = 0.0  # wall seconds inside those replays (the rest: starting and stopping)

    @property
    def name(self) -> str:
        return self.job.fleet.stem


def parse_entry(
    text: str, trace: Path | None, time_scale: float | None
) -> tuple[Path, Path | None, float | None]:
    """`FILE[,trace=FILE][,time-scale=X]` -> (fleet, trace, time scale); the defaults fill what is unsaid."""
    path, *options = text.split(",")
    if not path:
        raise EntryError(f"fleet entry {text!r}: no fleet file")
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or not value:
            raise EntryError(f"fleet entry {text!r}: {option!r} is not KEY=VALUE (trace=FILE, time-scale=X)")
        if key == "trace":
            trace = Path(value)
        elif key == "time-scale":
            time_scale = _positive(text, value)
        else:
            raise EntryError(f"fleet entry {text!r}: unknown option {key!r} (trace, time-scale)")
    return Path(path), trace, time_scale


def _positive(text: str, value: str) -> float:
    try:
        scale = float(value)
    except ValueError:
        scale = 0.0
    if not scale > 0:
        raise EntryError(f"fleet entry {text!r}: time-scale must be a positive number, not {value!r}")
    return scale


Bench = Callable[[FleetJob], FleetReport]  # a module-level function: worker processes import it by name


def run_jobs(bench: Bench, jobs: Sequence[FleetJob], workers: int) -> Iterator[FleetReport]:
    """Every job's report as it is ready; `workers` > 1 runs that many fleets at once, each in a fresh
    process (spawned: no event loop or open socket inherited, and nothing kept between fleets), and
    says on stderr when each one ends (the per-request bars are off in workers: they would interleave)."""
    if workers <= 1 or len(jobs) <= 1:
        yield from (bench(job) for job in jobs)
        return
    context = multiprocessing.get_context("spawn")
    started = time.monotonic()
    pool = ProcessPoolExecutor(min(workers, len(jobs)), mp_context=context, max_tasks_per_child=1)
    try:
        futures = [pool.submit(bench, replace(job, progress=False)) for job in jobs]
        for done, future in enumerate(as_completed(futures), 1):
            report = future.result()
            elapsed = time.monotonic() - started
            print(f"[{done}/{len(jobs)}] {report.name} done at {elapsed:.0f} s", file=sys.stderr, flush=True)
            yield report
    finally:  # a failed fleet (or Ctrl-C) stops the others instead of waiting for them
        pool.shutdown(wait=True, cancel_futures=True)
