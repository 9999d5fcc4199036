"""Figures of `bench routing`: one replay's summary, and the median and spread over repeated replays.

A replay's figures move with the machine's load (the twin shares its event loop with the gateway and the
client), so the bench replays every strategy several times, in rounds (every strategy once per round, so a
busy minute hurts all of them alike), and reports the median with the min..max spread. Ratios to the
oracles (share of their goodput, share of the gain over round robin, TTFT p95) and to the round's best
strategy are taken within a round, then their median and spread are reported.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

from gateway.bench.routing_decisions import DecisionCpu, DecisionEntry
from gateway.bench.routing_trace import DEFAULT_TRACE, Outcome, Stream, Trace
from gateway.stats.live import percentile

LAG_WARNING = 0.05  # loop lag p95 above this share of the median request's e2e: figures are the loop's


@dataclass(frozen=True)
class FaultFigures:
    """What a fleet's faults cost one replay (routing.fault_figures); None: the fleet has no such fault."""

    to_slowed: int | None = None  # requests served by a slowed engine, sent after its slowdown
    sent_after_slowdown: int = 0  # all requests sent after the (first) slowdown, for scale
    crash_no_content_failures: int | None = None  # failed with no content, running at or after a crash
    crash_exposed: int | None = None  # requests running at or sent after the crash


@dataclass(frozen=True)
class StrategyResult:
    policy: str
    goodput_tok_s: float
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    failures: int
    refused: int
    requests: int
    duration_s: float
    detail: str = ""
    e2e_p50_ms: float | None = None
    # Simulated ms the event loop woke sleepers late (LoopLag); None on a virtual clock, never late.
    loop_lag_p95_ms: float | None = None
    round: int = 0
    routed: str = ""  # per class, successful requests per backend: "C: fp8-mtp 40, fp8-base 8; ..."
    faults: FaultFigures | None = None
    # Simulated seconds of each phase of the trace, in order: a phase ends when its last request does, so
    # where a strategy loses time shows phase by phase (the makespan is their sum).
    phases_s: tuple[float, ...] = ()
    decisions: tuple[DecisionEntry, ...] = ()  # every routing decision, in the order made
    decision_cpu: DecisionCpu | None = None  # their thread CPU time


def summarize(
    name: str, outcomes: Sequence[Outcome], duration_s: float, unservable: set[str], detail: str = ""
) -> StrategyResult:
    """Simulated-time figures of one replay (outcomes and duration already scaled)."""
    ok = [o for o in outcomes if o.ok]
    refused = [o for o in outcomes if not o.ok and o.cls in unservable]
    ttfts = [o.ttft for o in ok if o.ttft is not None]
    tokens = sum(o.output_tokens for o in ok)
    p50, p95 = percentile(ttfts, 50), percentile(ttfts, 95)
    e2e = percentile([o.e2e for o in ok], 50)
    return StrategyResult(
        policy=name,
        goodput_tok_s=round(tokens / duration_s, 2) if duration_s > 0 else 0.0,
        ttft_p50_ms=_ms(p50),
        ttft_p95_ms=_ms(p95),
        failures=len(outcomes) - len(ok) - len(refused),
        refused=len(refused),
        requests=len(outcomes),
        duration_s=round(duration_s, 1),
        detail=detail,
        e2e_p50_ms=_ms(e2e),
        routed=routed(ok),
    )


def routed(outcomes: Sequence[Outcome]) -> str:
    counts: dict[str, dict[str, int]] = {}
    for o in outcomes:
        per_class = counts.setdefault(o.cls, {})
        per_class[o.backend] = per_class.get(o.backend, 0) + 1
    return "; ".join(
        f"{cls}: " + ", ".join(f"{b} {n}" for b, n in sorted(c.items(), key=lambda kv: -kv[1]))
        for cls, c in counts.items()
    )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        return Spread(statistics.median(values), min(values), max(values)) if values else None

    def text(self, fmt: str = ".1f") -> str:
        if self.low == self.high:
            return f"{self.median:{fmt}}"
        return f"{self.median:{fmt}} [{self.low:{fmt}}-{self.high:{fmt}}]"


def by_policy(results: Sequence[StrategyResult]) -> dict[str, list[StrategyResult]]:
    grouped: dict[str, list[StrategyResult]] = {}
    for r in results:
        grouped.setdefault(r.policy, []).append(r)
    return grouped


Figure = Callable[[dict[str, StrategyResult]], float | None]  # one round's strategies -> a figure


def paired(results: Sequence[StrategyResult], policy: str, figure: Figure) -> Spread | None:
    """A figure computed within each round (e.g. adaptive / oracle), over the rounds where it exists."""
    rounds: dict[int, dict[str, StrategyResult]] = {}
    for r in results:
        rounds.setdefault(r.round, {})[r.policy] = r
    values = [v for members in rounds.values() if policy in members and (v := figure(members)) is not None]
    return Spread.of(values)


def share_of_oracle(policy: str, oracle_name: str = "oracle") -> Figure:
    def figure(members: dict[str, StrategyResult]) -> float | None:
        oracle = members.get(oracle_name)
        if oracle is None or not oracle.goodput_tok_s:
            return None
        return 100 * members[policy].goodput_tok_s / oracle.goodput_tok_s

    return figure


def gain_share(members: dict[str, StrategyResult]) -> float | None:
    """Adaptive's gain over round robin as a share (%) of the oracle's gain over round robin."""
    rr, adaptive, oracle = members.get("round_robin"), members.get("adaptive"), members.get("oracle")
    if rr is None or adaptive is None or oracle is None or oracle.goodput_tok_s <= rr.goodput_tok_s:
        return None
    return 100 * (adaptive.goodput_tok_s - rr.goodput_tok_s) / (oracle.goodput_tok_s - rr.goodput_tok_s)


def ttft_p95_share(members: dict[str, StrategyResult]) -> float | None:
    adaptive, oracle = members.get("adaptive"), members.get("oracle")
    if adaptive is None or oracle is None or not adaptive.ttft_p95_ms or not oracle.ttft_p95_ms:
        return None
    return 100 * adaptive.ttft_p95_ms / oracle.ttft_p95_ms


def share_of_best(policy: str) -> Figure:
    """The policy's goodput as % of the round's best strategy (oracles included)."""

    def figure(members: dict[str, StrategyResult]) -> float | None:
        best = max(members.values(), key=lambda r: r.goodput_tok_s)
        if policy not in members or not best.goodput_tok_s:
            return None
        return 100 * members[policy].goodput_tok_s / best.goodput_tok_s

    return figure


def best_per_round(results: Sequence[StrategyResult]) -> list[str]:
    rounds: dict[int, list[StrategyResult]] = {}
    for r in results:
        rounds.setdefault(r.round, []).append(r)
    return [max(members, key=lambda r: r.goodput_tok_s).policy for _, members in sorted(rounds.items())]


def clock_label(time_scale: float | None) -> str:
    """How a fleet's replays kept time: a virtual clock (None), or the wall clock sped up `time_scale`x."""
    return "virtual clock" if time_scale is None else f"x{time_scale:g}"


def render(
    fleet: str,
    results: Sequence[StrategyResult],
    time_scale: float | None,
    oracles: dict[str, str],
    trace: Trace = DEFAULT_TRACE,
) -> str:
    rounds = len({r.round for r in results})
    faulty = any(r.faults is not None for r in results)
    header = (
        "policy",
        "goodput tok/s",
        "TTFT p50 ms",
        "TTFT p95 ms",
        "failures",
        "refused",
        "% oracle",
        "% split",
        "loop lag p95 ms",
    ) + (("to slowed", "no-content fail") if faulty else ())
    rows = [header]
    for policy, runs in by_policy(results).items():
        share = paired(results, policy, share_of_oracle(policy))
        split = paired(results, policy, share_of_oracle(policy, "split_oracle"))
        row = (
            policy,
            _spread(r.goodput_tok_s for r in runs),
            _spread((r.ttft_p50_ms for r in runs), ".0f"),
            _spread((r.ttft_p95_ms for r in runs), ".0f"),
            str(max(r.failures for r in runs)),
            str(max(r.refused for r in runs)),
            "-" if share is None else share.text(),
            "-" if split is None else split.text(),
            _spread((r.loop_lag_p95_ms for r in runs), ".0f"),
        )
        rows.append(row + (_fault_cells(runs) if faulty else ()))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        f"fleet {fleet}, trace {trace.name}: {trace.requests()} requests per replay, {rounds} round(s), "
        f"simulated time ({clock_label(time_scale)}); median [min-max] over rounds, failures and refused: "
        "worst round"
    ]
    lines += ["  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines += [f"{name}: {detail}" for name, detail in oracles.items()]
    lines += [f"{r.policy} (round {r.round}) routed {r.routed}" for r in results if r.policy == "adaptive"]
    lines += phase_lines(results, trace)
    lines += decision_cpu_lines(results)
    lines += _verdict(results)
    lines += _fault_legend(results) if faulty else []
    lines += _lag_warning(results)
    return "\n".join(lines)


def phase_lines(results: Sequence[StrategyResult], trace: Trace = DEFAULT_TRACE) -> list[str]:
    """Per strategy, each phase's simulated seconds (median over rounds), labelled by its classes."""
    labels = [phase_label(phase) for phase in trace.phases]
    policies = {
        policy: runs
        for policy, runs in by_policy(results).items()
        if all(len(r.phases_s) == len(labels) for r in runs)
    }
    if not policies:
        return []
    width = max(len(p) for p in policies)
    lines = ["phases, simulated s (median over rounds): " + " | ".join(labels)]
    for policy, runs in policies.items():
        medians = [statistics.median(r.phases_s[i] for r in runs) for i in range(len(labels))]
        lines.append(f"  {policy.ljust(width)}  " + " | ".join(f"{m:.1f}" for m in medians))
    return lines


def decision_cpu_lines(results: Sequence[StrategyResult]) -> list[str]:
    """Per strategy, the thread CPU time of one routing decision over all its rounds' decisions."""
    cpu = {
        policy: figures
        for policy, runs in by_policy(results).items()
        if (figures := DecisionCpu.of([e for r in runs for e in r.decisions])) is not None
    }
    if not cpu:
        return []
    width = max(len(p) for p in cpu)
    lines = ["decision CPU (thread time of one route() call, all rounds): median / p99 us"]
    lines += [
        f"  {p.ljust(width)}  {c.p50_us:.0f} / {c.p99_us:.0f} ({c.decisions} decisions)"
        for p, c in cpu.items()
    ]
    return lines


def phase_label(phase: Sequence[Stream]) -> str:
    """A phase's classes, joined ("D+image"); "mixed" for more than two."""
    classes = list(dict.fromkeys(stream.cls for stream in phase))
    return "+".join(classes) if len(classes) <= 2 else "mixed"


def _fault_cells(runs: Sequence[StrategyResult]) -> tuple[str, str]:
    faults = [r.faults for r in runs if r.faults is not None]
    slowed = [f"{f.to_slowed}/{f.sent_after_slowdown}" for f in faults if f.to_slowed is not None]
    crashed = [
        f"{f.crash_no_content_failures}/{f.crash_exposed}"
        for f in faults
        if f.crash_no_content_failures is not None
    ]
    return (",".join(slowed) or "-", ",".join(crashed) or "-")


def _fault_legend(results: Sequence[StrategyResult]) -> list[str]:
    return [
        "to slowed: requests served by the slowed engine that were sent after its slowdown / all sent "
        "after it, per round; no-content fail: requests with no content yet that failed / requests "
        "running at or sent after the crash, per round"
    ]


def _verdict(results: Sequence[StrategyResult]) -> list[str]:
    figures = [
        (
            "adaptive, % of split oracle goodput",
            paired(results, "adaptive", share_of_oracle("adaptive", "split_oracle")),
        ),
        ("adaptive, % of oracle goodput", paired(results, "adaptive", share_of_oracle("adaptive"))),
        ("adaptive gain over round_robin, % of oracle's", paired(results, "adaptive", gain_share)),
        ("adaptive TTFT p95, % of oracle's", paired(results, "adaptive", ttft_p95_share)),
        ("static, % of oracle goodput", paired(results, "static", share_of_oracle("static"))),
        (
            "static, % of split oracle goodput",
            paired(results, "static", share_of_oracle("static", "split_oracle")),
        ),
    ]
    lines = [f"{label}: {spread.text()}" for label, spread in figures if spread is not None]
    best = paired(results, "adaptive", share_of_best("adaptive"))
    if best is not None:
        lines.append(
            f"best strategy per round: {', '.join(best_per_round(results))}; "
            f"adaptive, % of the round's best: {best.text()}"
        )
    return lines


def _lag_warning(results: Sequence[StrategyResult]) -> list[str]:
    late = [
        r
        for r in results
        if r.loop_lag_p95_ms is not None and r.e2e_p50_ms and r.loop_lag_p95_ms > LAG_WARNING * r.e2e_p50_ms
    ]
    if not late:
        return []
    worst = max(late, key=lambda r: (r.loop_lag_p95_ms or 0.0) / (r.e2e_p50_ms or 1.0))
    return [
        f"warning: in {len(late)} of {len(results)} replays the event loop's p95 lateness exceeded "
        f"{LAG_WARNING:.0%} of the median request's e2e (worst {worst.loop_lag_p95_ms:.0f} ms against "
        f"{worst.e2e_p50_ms:.0f} ms): lower --time-scale, or leave it out for the virtual clock"
    ]


def _spread(values: Iterable[float | None], fmt: str = ".1f") -> str:
    present = [v for v in values if v is not None]
    spread = Spread.of(present)
    return "-" if spread is None else spread.text(fmt)


# The must-show figures, each judged on its median over the rounds (spread printed beside it).
BLIND = ("round_robin", "least_inflight")
MIN_VS_BLIND = 100.0  # adaptive goodput, % of the best blind strategy's
MIN_SPLIT_SHARE = 95.0  # adaptive goodput, % of the split oracle's
MAX_TTFT_VS_BEST = 120.0  # adaptive TTFT p95, % of the round's best strategy's
MAX_TO_SLOWED = 20  # requests the slowed engine still serves after its slowdown
MIN_SPLIT_SHARE_SLOWED = 90.0  # adaptive goodput, % of the split oracle's, on a fleet with a slowdown


@dataclass(frozen=True)
class Check:
    """One must-show figure of one fleet, and whether it holds; None: not measured (no such strategy)."""

    name: str
    spread: Spread | None
    at_least: float | None = None
    at_most: float | None = None
    every_round: bool = False  # judged on the worst round: "no failure" is a claim about every run

    @property
    def holds(self) -> bool | None:
        if self.spread is None:
            return None
        if self.at_least is not None:
            return (self.spread.low if self.every_round else self.spread.median) >= self.at_least
        assert self.at_most is not None
        return (self.spread.high if self.every_round else self.spread.median) <= self.at_most

    def target(self) -> str:
        bound = f">= {self.at_least:g}" if self.at_least is not None else f"<= {self.at_most:g}"
        return bound + (" every round" if self.every_round else "")

    def cell(self) -> str:
        if self.spread is None:
            return "-"
        return f"{self.spread.text()} {'ok' if self.holds else 'NO'}"

    def document(self) -> dict[str, object]:
        spread = None if self.spread is None else asdict(self.spread)
        return {"name": self.name, "target": self.target(), "holds": self.holds, **(spread or {})}


def vs_best_blind(members: dict[str, StrategyResult]) -> float | None:
    """Adaptive's goodput as % of the round's best blind strategy (round robin, least in-flight)."""
    blind = [members[name].goodput_tok_s for name in BLIND if name in members]
    adaptive = members.get("adaptive")
    if adaptive is None or not blind or not max(blind):
        return None
    return 100 * adaptive.goodput_tok_s / max(blind)


def ttft_vs_best(members: dict[str, StrategyResult]) -> float | None:
    """Adaptive's TTFT p95 as % of that of the round's best strategy by goodput (oracles included)."""
    adaptive = members.get("adaptive")
    best = max(members.values(), key=lambda r: r.goodput_tok_s)
    if adaptive is None or not adaptive.ttft_p95_ms or not best.ttft_p95_ms:
        return None
    return 100 * adaptive.ttft_p95_ms / best.ttft_p95_ms


def _adaptive_faults(results: Sequence[StrategyResult]) -> list[FaultFigures]:
    return [r.faults for r in results if r.policy == "adaptive" and r.faults is not None]


def must_show(results: Sequence[StrategyResult]) -> list[Check]:
    """The must-show checks that apply to this fleet, computed from its rounds."""
    split = paired(results, "adaptive", share_of_oracle("adaptive", "split_oracle"))
    checks = [
        Check("vs best blind %", paired(results, "adaptive", vs_best_blind), at_least=MIN_VS_BLIND),
        Check("% of split", split, at_least=MIN_SPLIT_SHARE),
        Check(
            "TTFT p95 vs best %",
            paired(results, "adaptive", ttft_vs_best),
            at_most=MAX_TTFT_VS_BEST,
        ),
    ]
    faults = _adaptive_faults(results)
    slowed = [float(f.to_slowed) for f in faults if f.to_slowed is not None]
    if slowed:
        checks.append(Check("to slowed", Spread.of(slowed), at_most=MAX_TO_SLOWED))
        checks.append(Check("% of split, slowed", split, at_least=MIN_SPLIT_SHARE_SLOWED))
    crashed = [float(f.crash_no_content_failures) for f in faults if f.crash_no_content_failures is not None]
    if crashed:
        checks.append(Check("no-content fail", Spread.of(crashed), at_most=0, every_round=True))
    return checks


def late_replays(results: Sequence[StrategyResult]) -> int:
    """Replays whose loop lag p95 exceeded LAG_WARNING of their median request's e2e."""
    return sum(
        1
        for r in results
        if r.loop_lag_p95_ms is not None and r.e2e_p50_ms and r.loop_lag_p95_ms > LAG_WARNING * r.e2e_p50_ms
    )


SUMMARY_STRATEGIES = ("round_robin", "least_inflight", "static", "adaptive", "oracle", "split_oracle")


def render_summary(fleets: Sequence[tuple[str, Sequence[StrategyResult]]]) -> str:
    """One row per fleet: each strategy's median goodput, then the must-show checks (median [min-max]
    over the rounds, ok / NO against the target), the loop's late replays, and which checks fail."""
    names = [c.name for c in must_show([])]
    extra = sorted({c.name for _, results in fleets for c in must_show(results)} - set(names))
    header = ("fleet", *SUMMARY_STRATEGIES, *names, *extra, "late replays", "failing")
    rows = [header]
    for label, results in fleets:
        checks = {c.name: c for c in must_show(results)}
        grouped = by_policy(results)
        goodput = [_median_goodput(grouped.get(name, [])) for name in SUMMARY_STRATEGIES]
        cells = [checks[n].cell() if n in checks else "n/a" for n in (*names, *extra)]
        failing = [c.name for c in checks.values() if c.holds is False]
        late = f"{late_replays(results)}/{len(results)}"
        rows.append((label, *goodput, *cells, late, ", ".join(failing) or "none"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    rounds = sorted({len({r.round for r in results}) for _, results in fleets})
    targets = {c.name: c.target() for _, results in fleets for c in must_show(results)}
    lines = [
        f"summary, {'/'.join(map(str, rounds))} round(s) per fleet: median goodput tok/s per strategy; "
        "checks, all of adaptive: median [min-max] over the rounds, ratios taken within each round"
    ]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.append("targets: " + "; ".join(f"{name} {target}" for name, target in targets.items()))
    lines.append(
        "late replays: rounds' replays whose event loop was late by more than "
        f"{LAG_WARNING:.0%} of the median request's e2e (figures of those measure the machine too)"
    )
    return "\n".join(lines)


def _median_goodput(runs: Sequence[StrategyResult]) -> str:
    spread = Spread.of([r.goodput_tok_s for r in runs])
    return "-" if spread is None else f"{spread.median:.1f}"
