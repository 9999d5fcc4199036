"""`spark-gateway bench routing --fleet FILE | --fleets ENTRY... [--trace FILE] [--jobs N] [--json]`:
routing strategies on one trace, per fleet, and whether the must-show figures hold.

The twin fleet and the gateway run in this process; the trace (routing_trace.TRACE: seed 003's A, B, C, D
shapes in phases and mixed, plus image requests and over-length prompts; or a trace file, see
routing_tracefile.py) is replayed through the gateway's ASGI app once per strategy and round
(`--repeats`), each on a fresh fleet and a fresh gateway:

    round_robin     blind rotation over the backends that can take the request (vision, context)
    least_inflight  blind, of those the one with the fewest requests in flight
    static          the fleet's shipped policy
    adaptive        the same policy with `routing: adaptive`, starting with no samples
    oracle          the best fixed assignment of each request class to one backend, found by trying them
    split_oracle    the best fixed per-class traffic fractions over the backends: a class may be spread
                    (both searched in routing_oracles.py)

Reported in simulated time: goodput (output tokens of successful requests / makespan), TTFT p50 and p95,
failures (servable requests that did not succeed), refused (requests no backend of the fleet can take:
over-length prompts, images on a fleet without vision), percent of each oracle's goodput, and adaptive
against the best strategy of the same round; median and spread over the rounds (routing_report.py). On a
fleet with faults, also how many requests the slowed engine still served after its slowdown and how many
requests that had received no content when an engine crashed failed anyway.

Time. By default every replay runs on a virtual clock (bench/virtual_time.py): the twin, the gateway and
the client share one event loop whose clock stands still while code runs and jumps to the next timer
when nothing is ready, so what a replay measures is the fleet and the routing, not how busy the machine
was; a busy machine makes the run longer, not slower. The gateway's own CPU time then costs no simulated
time (`bench overhead` measures it: well under a millisecond a request, against engine steps of tens),
and its settings are the product's defaults, in simulated seconds. Each round draws the twin's random
numbers (speculative acceptance, injected errors) from seeds of its own, so the spread over rounds is the
fleet's, not the machine's. `--time-scale X` runs on the wall clock instead, the twin X times faster:
there the loop's lateness is sampled during every replay, and a loop late by a sizeable share of a
request's latency (too high a time scale for the machine) measures the loop rather than the fleet, which
the bench says. Request bodies are built before the first replay (routing_trace.stream_bodies).

`--fleets` benches several fleets, each with its own trace and time scale if given (routing_suite.py),
side by side in `--jobs` worker processes, and ends with one summary: a row per fleet with each
strategy's median goodput and the must-show checks (routing_report.must_show) judged on their medians.

Reproducing: `--strategies` replays some strategies only (no oracle search unless an oracle is named);
`--write-golden` and `--against` keep and compare each strategy's rounds (routing_golden.py); every
decision is timed in thread CPU and logged (routing_decisions.py: `--decisions`, `--diff-decisions`,
`bench routing-diff`), and `--charge-decision-cpu` charges that CPU to the virtual clock.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import orjson
import yaml
from tqdm import tqdm

from gateway.app import build_app, build_gateway
from gateway.backends.registry import Status
from gateway.bench import virtual_time
from gateway.bench.routing_decisions import (
    DecisionCpu,
    TimedRouter,
    diverging,
    render_divergence,
    request_ids,
    write_log,
)
from gateway.bench.routing_golden import (
    GoldenError,
    compare,
    current_commit,
    read_golden,
    render_comparison,
    write_golden,
)
from gateway.bench.routing_oracles import (
    SPLIT_BUDGET,
    OracleSearch,
    Strategy,
    find_oracle,
    find_split_oracle,
)
from gateway.bench.routing_report import (
    SUMMARY_STRATEGIES,
    FaultFigures,
    StrategyResult,
    clock_label,
    must_show,
    render,
    render_summary,
    summarize,
)
from gateway.bench.routing_suite import EntryError, FleetJob, FleetReport, parse_entry, run_jobs
from gateway.bench.routing_trace import (
    DEFAULT_TRACE,
    LeastInflightRouter,
    Lifespan,
    Outcome,
    RoundRobinRouter,
    Stream,
    Trace,
    post,
    stream_bodies,
)
from gateway.bench.routing_tracefile import TraceError, load_trace
from gateway.commands import CommandError
from gateway.commands.serve import settings_for_fleet
from gateway.settings import Settings
from gateway.sim.fleet import EngineSpec, FleetSpec, load_fleet
from gateway.sim.runner import TwinFleet
from gateway.stats.live import percentile

DEFAULT_REPEATS = 3
STRATEGIES = SUMMARY_STRATEGIES  # every strategy, in the report's order (`--strategies` picks some)
# Round r draws the twin's random numbers from the fleet file's seeds plus r times this.
ROUND_SEED_STRIDE = 7919


class LoopLag:
    """How late the event loop wakes a sleeper, sampled every `interval_s` (wall) during a replay.

    The twin lays engine steps end to end on its own timeline, but the gateway, the client's closed loop
    and every streamed chunk run on the same loop: when the loop is late by L wall seconds, each of them
    is late by L x time_scale simulated seconds. A p95 lag well above an engine step (~20 ms on a GB10,
    a few ms on an H100) means the time scale is too high for this machine and the figures are not the
    fleet's but the loop's.
    """

    def __init__(self, interval_s: float = 0.005, sampling: bool = True) -> None:
        self.interval_s = interval_s
        self.sampling = sampling  # off on a virtual clock: never late, and a timer every 5 ms costs CPU
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.interval_s)
            self.lags.append(max(0.0, loop.time() - before - self.interval_s))

    async def __aenter__(self) -> LoopLag:
        if self.sampling:
            self._task = asyncio.ensure_future(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def p95(self) -> float | None:
        return percentile(self.lags, 95)


class Bench:
    def __init__(
        self,
        spec: FleetSpec,
        time_scale: float | None,
        workdir: Path,
        progress: tqdm[Any],
        trace: Trace = DEFAULT_TRACE,
        charge: bool = False,
    ) -> None:
        # The bench measures serving, not loading: engines start warm.
        engines = [e.model_copy(update={"warmup_s": 0.0}) for e in spec.engines]
        self.spec = spec.model_copy(update={"engines": engines})
        self.time_scale = time_scale  # None: the loop's own (virtual) clock, the twin at 1x
        self.scale = 1.0 if time_scale is None else time_scale
        self.workdir = workdir
        self.progress = progress
        self.model = spec.engines[0].served_model_name
        self.trace = trace
        self.unservable = {name for name, c in trace.classes.items() if not c.servable_by(self.spec)}
        self.bodies = stream_bodies(trace, self.spec, self.model)
        self.requests = request_ids(self.bodies)  # prompt -> its place in the trace, for decision logs
        self.charge = charge  # each decision's CPU time moves the virtual clock on
        self.replays = 0  # replays run so far, searches included
        self.simulated_s = 0.0  # their simulated seconds
        self.replaying_s = 0.0  # the wall seconds they took

    async def run(self, strategy: Strategy, round_: int = 0) -> StrategyResult:
        self.replays += 1
        started = time.monotonic()  # the machine's clock, whichever the loop keeps
        spec = self.spec.model_copy(update={"engines": [_reseeded(e, round_) for e in self.spec.engines]})
        async with TwinFleet(spec, time_scale=self.scale, ephemeral_ports=True) as fleet:
            await fleet.wait_ready()
            settings = self._settings({n: fleet.url(n) for n in fleet.names}, strategy.policy)
            router = strategy.router() if strategy.router is not None else None
            gateway = build_gateway(settings, router=router)
            timed = TimedRouter(gateway.router, self.requests, self.charge)
            gateway.router = timed  # the policy router keeps learning: build_gateway wired it already
            app = build_app(gateway)
            async with Lifespan(app):
                await _until_ready(gateway.registry.backends)
                async with LoopLag(sampling=self.time_scale is not None) as lag:
                    outcomes, phases = await self._replay(app, fleet.clock.now)
        self.replaying_s += time.monotonic() - started
        scaled = [_scaled(o, self.scale) for o in outcomes]
        wall = sum(phases)
        self.simulated_s += wall * self.scale
        result = summarize(strategy.name, scaled, wall * self.scale, self.unservable, strategy.detail)
        late = lag.p95()
        lag_ms = None if late is None else round(late * self.scale * 1000, 1)
        phases_s = tuple(round(p * self.scale, 1) for p in phases)
        faults = fault_figures(self.spec, scaled)
        decisions = tuple(timed.entries)
        return replace(
            result,
            loop_lag_p95_ms=lag_ms,
            faults=faults,
            phases_s=phases_s,
            decisions=decisions,
            decision_cpu=DecisionCpu.of(decisions),
        )

    def _settings(self, urls: Mapping[str, str], policy: Path | None) -> Settings:
        base = settings_for_fleet(self.spec, dict(urls))
        state = self.workdir / f"state-{self.replays}"  # adaptive starts with no samples
        update: dict[str, Any] = {"policy": policy, "state_dir": state}
        if self.time_scale is not None:
            # On the wall clock the product's intervals would be time_scale times longer in simulated
            # time (a 1 s scrape every 50 s at x50): these keep them near the product's in simulated time.
            update["probe"] = base.probe.model_copy(update={"interval_s": 0.5, "starting_interval_s": 0.02})
            update["measurement"] = base.measurement.model_copy(update={"scrape_interval_s": 0.05})
        return base.model_copy(update=update)

    async def _replay(self, app: Any, now: Callable[[], float]) -> tuple[list[Outcome], list[float]]:
        """Every phase in turn: the outcomes, and each phase's wall seconds (their sum is the replay's)."""
        loop = asyncio.get_running_loop()
        outcomes: list[Outcome] = []
        phases: list[float] = []
        for p, phase in enumerate(self.trace.phases):
            started = loop.time()
            streams = (self._stream(app, st, self.bodies[p, s], outcomes, now) for s, st in enumerate(phase))
            await asyncio.gather(*streams)
            phases.append(loop.time() - started)
        return outcomes, phases

    async def _stream(
        self, app: Any, stream: Stream, bodies: list[bytes], out: list[Outcome], now: Callable[[], float]
    ) -> None:
        cls = self.trace.classes[stream.cls]

        async def one(body: bytes) -> None:
            out.append(await post(app, cls, body, sent_at=now()))
            self.progress.update(1)

        offsets = stream.arrival_offsets()
        if offsets is None:
            left = iter(bodies)

            async def user() -> None:
                for body in left:
                    await one(body)

            await asyncio.gather(*(user() for _ in range(stream.users)))
            return
        start = now()

        async def at(offset: float, body: bytes) -> None:  # open loop: sent on time whatever the others do
            await asyncio.sleep(max(0.0, start + offset - now()) / self.scale)
            await one(body)

        await asyncio.gather(*(at(offset, body) for offset, body in zip(offsets, bodies, strict=True)))


async def _until_ready(backends: Mapping[str, Any], timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        while any(state.status is not Status.READY for state in backends.values()):
            await asyncio.sleep(0.01)


def _reseeded(engine: EngineSpec, round_: int) -> EngineSpec:
    """The engine with round `round_`'s seeds: its own draws (errors, the flavor's) and its acceptances'."""
    step = ROUND_SEED_STRIDE * round_
    perf = engine.perf.model_copy(update={"seed": engine.perf.seed + step})
    return engine.model_copy(update={"seed": engine.seed + step, "perf": perf})


def _scaled(o: Outcome, factor: float) -> Outcome:
    ttft = None if o.ttft is None else o.ttft * factor
    return Outcome(o.cls, o.status, ttft, o.e2e * factor, o.output_tokens, o.error, o.backend, o.sent_at)


def fault_figures(spec: FleetSpec, outcomes: list[Outcome]) -> FaultFigures | None:
    """What the fleet's faults cost (scaled outcomes; `sent_at` is on the fleet's clock, like the faults).

    to_slowed: requests served by an engine that were sent at or after its slowdown_at_s ("requests to
    leave": a router that noticed sends few). crash_no_content_failures: requests still running at an
    engine's crash_at_s (or sent after it) that had received no content and still failed; the gateway
    may fail those over, so every one counts against it.
    """
    slowed = {e.name: e.faults.slowdown_at_s for e in spec.engines if e.faults.slowdown_at_s is not None}
    crashes = [e.faults.crash_at_s for e in spec.engines if e.faults.crash_at_s is not None]
    if not slowed and not crashes:
        return None
    to_slowed = sum(1 for o in outcomes if o.backend in slowed and o.sent_at >= slowed[o.backend])
    crash_at = min(crashes) if crashes else None
    exposed = [o for o in outcomes if crash_at is not None and o.sent_at + o.e2e >= crash_at]
    # 400s are the client's (over-length prompts, images without vision): no crash caused those.
    no_content = sum(1 for o in exposed if not o.ok and o.ttft is None and o.status != 400)
    return FaultFigures(
        to_slowed=to_slowed if slowed else None,
        sent_after_slowdown=sum(1 for o in outcomes if slowed and o.sent_at >= min(slowed.values())),
        crash_no_content_failures=no_content if crashes else None,
        crash_exposed=len(exposed) if crashes else None,
    )


def routed_copy(policy: Path, workdir: Path, routing: str) -> Path:
    """The same policy file with `routing` for every profile (per-profile overrides dropped): the static
    strategy is the prefer order alone, the adaptive one the same order as its prior, whatever the file
    says."""
    data = yaml.safe_load(policy.read_text())
    data["routing"] = routing
    for profile in data.get("profiles", []):
        profile.pop("routing", None)
    path = workdir / f"{routing}-{policy.name}"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@dataclass(frozen=True)
class FleetRun:
    """One fleet's rounds, the oracles found, and what it took: replays and their simulated seconds."""

    results: list[StrategyResult]
    oracles: dict[str, str]
    replays: int  # searches included
    simulated_s: float
    replaying_s: float  # wall seconds inside the replays


async def run_fleet(
    path: Path,
    time_scale: float | None,
    repeats: int = 1,
    trace: Trace = DEFAULT_TRACE,
    split_budget: int = SPLIT_BUDGET,
    progress: bool = True,
    chosen: Collection[str] = STRATEGIES,
    charge: bool = False,
) -> FleetRun:
    """The `chosen` strategies `repeats` times each, in rounds; the oracles are searched once (only when
    one is chosen: the searches cost more replays than a round), then replayed in every round like the
    others (the search's own best replay is the luckiest of many: not reused)."""
    spec = load_fleet(path)
    policy = settings_for_fleet(spec, {e.name: "http://127.0.0.1:1" for e in spec.engines}).policy
    with tempfile.TemporaryDirectory(prefix="bench-routing-") as tmp:
        workdir = Path(tmp)
        strategies = _strategies(trace.capable(spec), policy, workdir, chosen)
        with tqdm(unit="req", file=sys.stderr, desc=spec.name, disable=not progress) as bar:
            bench = Bench(spec, time_scale, workdir, bar, trace, charge)
            oracle: OracleSearch | None = None
            split: OracleSearch | None = None
            if {"oracle", "split_oracle"} & set(chosen):
                oracle = await find_oracle(bench)
                if "split_oracle" in chosen:
                    split = await find_split_oracle(bench, oracle, split_budget)
            results = []
            for round_ in range(repeats):
                for strategy in strategies:
                    results.append(replace(await bench.run(strategy, round_), round=round_))
                if oracle is not None:
                    results += await _oracle_round(bench, oracle, split, round_)
    return FleetRun(
        results,
        _oracle_details(oracle, split),
        bench.replays,
        round(bench.simulated_s, 1),
        round(bench.replaying_s, 1),
    )


def _strategies(
    capable: dict[str, list[str]], policy: Path | None, workdir: Path, chosen: Collection[str]
) -> list[Strategy]:
    """The chosen strategies but the oracles, in the report's order (static and adaptive need a policy)."""
    strategies = [
        Strategy("round_robin", lambda: RoundRobinRouter(capable)),
        Strategy("least_inflight", lambda: LeastInflightRouter(capable)),
    ]
    if policy is not None:
        strategies += [
            Strategy("static", None, routed_copy(policy, workdir, "static"), detail=f"{policy.name}, static"),
            Strategy(
                "adaptive", None, routed_copy(policy, workdir, "adaptive"), detail=f"{policy.name}, adaptive"
            ),
        ]
    return [s for s in strategies if s.name in chosen]


async def _oracle_round(
    bench: Bench, oracle: OracleSearch, split: OracleSearch | None, round_: int
) -> list[StrategyResult]:
    """One round of the oracle and, when searched, the split oracle (with the oracle it starts from)."""
    result = replace(await bench.run(oracle.strategy, round_), round=round_)
    if split is None:
        return [result]
    if split.assignment:  # no split beat the assignment: the same routing, not replayed twice
        return [result, replace(result, policy="split_oracle", detail=split.strategy.detail)]
    return [result, replace(await bench.run(split.strategy, round_), round=round_)]


def _oracle_details(oracle: OracleSearch | None, split: OracleSearch | None) -> dict[str, str]:
    details = {} if oracle is None else {"oracle": f"{oracle.strategy.detail} (best of {oracle.tried})"}
    if split is not None:
        details["split_oracle"] = f"{split.strategy.detail} (best of {split.tried} after the oracle" + (
            "; no split beat it: the oracle's replays)" if split.assignment else ")"
        )
    return details


def bench_fleet(job: FleetJob) -> FleetReport:
    """One fleet's whole bench, searches then rounds (module level: worker processes import it by name)."""
    trace = load_trace(job.trace) if job.trace else DEFAULT_TRACE
    started = time.monotonic()

    chosen = job.strategies or STRATEGIES

    def fleet() -> Any:
        return run_fleet(
            job.fleet, job.time_scale, job.repeats, trace, job.split_budget, job.progress, chosen, job.charge
        )

    run = asyncio.run(fleet()) if job.time_scale is not None else virtual_time.run(fleet)
    if job.decisions is not None:
        for result in run.results:
            log = job.decisions / job.fleet.stem / f"{result.policy}.r{result.round}.jsonl"
            write_log(log, result.decisions)
    table = render(job.fleet.stem, run.results, job.time_scale, run.oracles, trace)
    wall = round(time.monotonic() - started, 1)
    return FleetReport(
        job, trace.name, run.results, run.oracles, table, wall, run.replays, run.simulated_s, run.replaying_s
    )


def fleet_jobs(args: argparse.Namespace) -> list[FleetJob]:
    """The command line's fleets, each file (fleet and trace) read once here, so a bad one stops the run
    before any replay."""
    default_trace = Path(args.trace) if args.trace else None
    strategies = chosen_strategies(args)
    if args.charge_decision_cpu and args.time_scale is not None:
        raise CommandError("--charge-decision-cpu needs the virtual clock: leave out --time-scale", status=2)
    decisions = Path(args.decisions) if args.decisions else None
    jobs = []
    for position, entry in enumerate(args.fleets or [args.fleet]):
        try:
            fleet, trace_path, scale = parse_entry(entry, default_trace, args.time_scale)
        except EntryError as exc:
            raise CommandError(str(exc), status=2) from exc
        load_fleet(fleet)  # a bad fleet file is reported by the CLI as `file:line: ...`
        if trace_path is not None:
            _check_trace(trace_path)
        if args.charge_decision_cpu and scale is not None:
            raise CommandError(
                f"fleet entry {entry!r}: --charge-decision-cpu needs the virtual clock", status=2
            )
        job = FleetJob(fleet, trace_path, scale, args.repeats, args.split_budget, position=position)
        jobs.append(replace(job, strategies=strategies, charge=args.charge_decision_cpu, decisions=decisions))
    return jobs


def chosen_strategies(args: argparse.Namespace) -> tuple[str, ...]:
    """`--strategies a,b` (and `--diff-decisions a,b`, which replays those two): () for all of them."""
    names = [n.strip() for n in (args.strategies or "").split(",") if n.strip()]
    names += [n for n in diff_pair(args) or () if n not in names]
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        raise CommandError(f"unknown strategy {unknown[0]!r}; strategies: {', '.join(STRATEGIES)}", status=2)
    if "split_oracle" in names and "oracle" not in names:  # the split oracle starts from the oracle
        names.append("oracle")
    return tuple(n for n in STRATEGIES if n in names)


def diff_pair(args: argparse.Namespace) -> tuple[str, str] | None:
    if not args.diff_decisions:
        return None
    pair = tuple(n.strip() for n in args.diff_decisions.split(","))
    if len(pair) != 2 or not all(pair) or pair[0] == pair[1]:
        raise CommandError(
            f"--diff-decisions takes two strategies, A,B: not {args.diff_decisions!r}", status=2
        )
    return pair[0], pair[1]


def _check_trace(path: Path) -> None:
    try:
        load_trace(path)
    except TraceError as exc:
        raise CommandError(str(exc), status=2) from exc
    except OSError as exc:
        raise CommandError(f"cannot read trace file {path}: {exc.strerror or exc}", status=2) from exc


REPLAY_KEYS = (
    "policy",
    "round",
    "goodput_tok_s",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "e2e_p50_ms",
    "failures",
    "refused",
    "requests",
    "duration_s",
    "loop_lag_p95_ms",
    "faults",
    "decision_cpu",
)


def fleet_document(report: FleetReport) -> dict[str, Any]:
    """One fleet for --json: the oracles found, every replay (with its round), the must-show checks."""
    return {
        "fleet": report.name,
        **report.oracles,
        "trace": report.trace_name,
        "time_scale": report.job.time_scale,  # null: the virtual clock
        "wall_s": report.wall_s,
        "replays": report.replays,
        "simulated_s": report.simulated_s,
        "replaying_s": report.replaying_s,
        "results": [{k: asdict(r)[k] for k in REPLAY_KEYS} for r in report.results],
        "checks": [check.document() for check in must_show(report.results)],
    }


def _label(report: FleetReport) -> str:
    trace = "" if report.job.trace is None else f" {report.trace_name}"
    return f"{report.name}{trace} {clock_label(report.job.time_scale)}"


def _handle(args: argparse.Namespace) -> int:
    jobs = fleet_jobs(args)
    golden = _golden(Path(args.against)) if args.against else None  # a bad file stops the run before it
    pair = diff_pair(args)
    reports = []
    for report in run_jobs(bench_fleet, jobs, args.jobs):
        reports.append(report)
        if args.write_golden:  # fleet by fleet: a long run stopped half-way keeps what it measured
            write_golden(Path(args.write_golden), [report], current_commit())
        if not args.json:  # each fleet's table as soon as it is done: a long set shows its progress
            print(f"{report.table}\n{_timing(report)}\n", flush=True)
            if pair is not None:
                print(decision_diffs(report, *pair) + "\n", flush=True)
    reports.sort(key=lambda r: r.job.position)
    if args.json:
        documents = [fleet_document(r) for r in reports]
        print(orjson.dumps(documents[0] if args.fleet else {"fleets": documents}).decode())
    else:
        print(render_summary([(_label(r), r.results) for r in reports]))
    if args.write_golden:
        print(f"golden figures of {len(reports)} fleet(s) written to {args.write_golden}", file=sys.stderr)
    if golden is None:
        return 0
    rows = compare(golden, reports)
    print(render_comparison(rows), file=sys.stderr if args.json else sys.stdout)
    return 1 if any(c.verdict == "BELOW" for c in rows) else 0


def _golden(path: Path) -> dict[str, Any]:
    try:
        return read_golden(path)
    except GoldenError as exc:
        raise CommandError(str(exc), status=2) from exc


def decision_diffs(report: FleetReport, a: str, b: str) -> str:
    """Per round, where strategies a and b routed the same request of the trace differently."""
    runs = {(r.policy, r.round): r.decisions for r in report.results}
    rounds = sorted({r.round for r in report.results})
    parts = [
        f"{report.name}, round {n}: "
        + render_divergence(a, b, diverging(runs.get((a, n), ()), runs.get((b, n), ())))
        for n in rounds
    ]
    return "\n".join(parts)


def _timing(report: FleetReport) -> str:
    """Where the fleet's wall time went: the replays themselves, and the rest (the search's bookkeeping,
    building the bodies, the worker process)."""
    rest = report.wall_s - report.replaying_s
    return (
        f"wall {report.wall_s:.0f} s for {report.replays} replays (searches included): "
        f"{report.replaying_s:.0f} s in replays of {report.simulated_s:.0f} simulated s "
        f"({clock_label(report.job.time_scale)}), {rest:.0f} s besides"
    )


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "routing", help="routing strategies (round robin .. adaptive, oracle) on a mixed trace over a twin"
    )
    fleets = parser.add_mutually_exclusive_group(required=True)
    fleets.add_argument("--fleet", help="twin fleet file (its policy is the static strategy)")
    fleets.add_argument(
        "--fleets",
        nargs="+",
        metavar="FILE[,trace=FILE][,time-scale=X]",
        help="several fleet files, each with its own trace and time scale if given; one summary of the "
        "must-show checks at the end",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="run on the wall clock, the twin this many times faster (default: a virtual clock, whose "
        "figures do not depend on the machine's load; results are in simulated time either way)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help="rounds: every strategy replayed this many times (median and spread reported)",
    )
    parser.add_argument(
        "--trace",
        default=None,
        help="trace file to replay (YAML, see gateway/bench/routing_tracefile.py); "
        "default: the built-in mixed trace",
    )
    parser.add_argument(
        "--split-budget",
        type=int,
        default=SPLIT_BUDGET,
        help="split oracle: candidate fractions replayed after the assignment oracle",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="fleets benched at once, each in its own process (the loop lag each replay reports shows "
        "whether they crowd each other)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help='print {"oracle": ..., "split_oracle": ..., "results": [every replay], "checks": [...]} '
        '(with --fleets: {"fleets": [one such per fleet]}) instead of tables',
    )
    _reproducing_options(parser)
    parser.set_defaults(handler=_handle)


def _reproducing_options(parser: argparse.ArgumentParser) -> None:
    """Options to replay some strategies only, keep and compare golden figures, and log decisions."""
    parser.add_argument(
        "--strategies",
        metavar="A,B,...",
        help=f"replay only these ({', '.join(STRATEGIES)}); the oracles' searches run only when one of "
        "them is named (split_oracle brings oracle)",
    )
    parser.add_argument(
        "--write-golden",
        metavar="PATH",
        help="write each fleet's rounds and medians per strategy, and the code's commit, into this JSON "
        "file (fleets and strategies not replayed now are kept)",
    )
    parser.add_argument(
        "--against",
        metavar="PATH",
        help="compare each strategy's median with a golden file's rounds (exit 1 when one is below them)",
    )
    parser.add_argument(
        "--decisions",
        metavar="DIR",
        help="write every replay's decisions to DIR/FLEET/STRATEGY.rROUND.jsonl (`bench routing-diff` "
        "compares two)",
    )
    parser.add_argument(
        "--diff-decisions",
        metavar="A,B",
        help="replay strategies A and B (besides --strategies) and print, per round, where they route the "
        "same request differently",
    )
    parser.add_argument(
        "--charge-decision-cpu",
        action="store_true",
        help="the virtual clock moves on by each routing decision's thread CPU time, as a real "
        "single-threaded gateway is held up by it",
    )
