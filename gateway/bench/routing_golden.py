"""Golden figures of `bench routing`: what each strategy reached on each fleet, and on which code.

`--write-golden PATH` keeps, per fleet and strategy, every round's goodput, their median and spread, and
the commit of the source tree they were measured on; a run of some fleets or some strategies updates
those in the file and leaves the others. `--against PATH` prints, per fleet and strategy, today's median
beside the golden one and whether it lies within the golden rounds' spread (min..max), above it or BELOW
it. On the virtual clock a replay depends on nothing but the code, the fleet, the trace and the round's
seeds, so the same code reads the same figures round for round: any move is the code's.

docs/routing-golden.json holds the figures of the shipped fleets and the variants (deploy/fleets/variants);
docs/measurement.md says how it was made.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gateway.bench.routing_report import Spread, by_policy
from gateway.bench.routing_suite import FleetReport

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("gateway", "policies", "deploy")  # what a replay's figures depend on


class GoldenError(ValueError):
    """A golden file that cannot be read."""


def current_commit(repo: Path = REPO) -> str:
    """The checkout's commit, with "-dirty" when its code, policies or fleets differ from it; "unknown"
    outside a git checkout (an installed package)."""
    try:
        head = _git(repo, "rev-parse", "--short=12", "HEAD")
        dirty = _git(repo, "status", "--porcelain", "--", *SOURCES)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout.strip()


def fleet_entry(report: FleetReport, commit: str) -> dict[str, Any]:
    """One fleet's golden figures: per strategy, every round's goodput, median, min and max."""
    strategies = {}
    for policy, runs in by_policy(report.results).items():
        rounds = [r.goodput_tok_s for r in sorted(runs, key=lambda r: r.round)]
        spread = Spread.of(rounds)
        assert spread is not None  # by_policy groups at least one replay
        strategies[policy] = {
            "commit": commit,
            "rounds": rounds,
            "median": spread.median,
            "low": spread.low,
            "high": spread.high,
        }
    return {"trace": report.trace_name, "time_scale": report.job.time_scale, "strategies": strategies}


def read_golden(path: Path) -> dict[str, Any]:
    """The golden document ({"fleets": {name: entry}}); a missing file is an empty one."""
    if not path.exists():
        return {"fleets": {}}
    try:
        document = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise GoldenError(f"cannot read golden file {path}: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("fleets"), dict):
        raise GoldenError(f'golden file {path}: expected {{"fleets": {{...}}}}')
    return document


def write_golden(path: Path, reports: Sequence[FleetReport], commit: str) -> None:
    """Merge these fleets' figures into the file: a strategy replayed now replaces its golden entry."""
    document = read_golden(path)
    fleets: dict[str, Any] = document["fleets"]
    for report in reports:
        entry = fleet_entry(report, commit)
        old = fleets.get(report.name, {})
        kept = old.get("strategies", {}) if old.get("trace") == entry["trace"] else {}
        entry["strategies"] = {**kept, **entry["strategies"]}
        fleets[report.name] = entry
    document["fleets"] = dict(sorted(fleets.items()))
    path.write_text(golden_text(document))


def golden_text(document: Mapping[str, Any]) -> str:
    """JSON with a line per fleet and strategy, so a diff of the file shows which figures moved."""
    fleets = []
    for name, entry in document["fleets"].items():
        head = {k: v for k, v in entry.items() if k != "strategies"}
        rows = [f'      "{s}": {orjson.dumps(f).decode()}' for s, f in entry.get("strategies", {}).items()]
        opening = orjson.dumps(head).decode()[:-1]  # the fleet's other keys, its strategies follow
        fleets.append(f'    "{name}": {opening}, "strategies": {{\n' + ",\n".join(rows) + "\n    }}")
    return '{\n  "fleets": {\n' + ",\n".join(fleets) + "\n  }\n}\n"


@dataclass(frozen=True)
class Comparison:
    fleet: str
    strategy: str
    now: Spread
    golden: Spread | None  # None: not in the golden file (or measured on another trace)
    commit: str = ""

    @property
    def verdict(self) -> str:
        if self.golden is None:
            return "not in golden"
        if self.now.median < self.golden.low:
            return "BELOW"
        return "above" if self.now.median > self.golden.high else "within"


def compare(golden: Mapping[str, Any], reports: Sequence[FleetReport]) -> list[Comparison]:
    """Per fleet and strategy replayed now, its median against the golden rounds' spread."""
    rows = []
    for report in reports:
        entry = golden["fleets"].get(report.name, {})
        same_trace = entry.get("trace") == report.trace_name
        for policy, runs in by_policy(report.results).items():
            now = Spread.of([r.goodput_tok_s for r in runs])
            assert now is not None
            old = entry.get("strategies", {}).get(policy) if same_trace else None
            spread = None if old is None else Spread(old["median"], old["low"], old["high"])
            rows.append(Comparison(report.name, policy, now, spread, "" if old is None else old["commit"]))
    return rows


def render_comparison(rows: Sequence[Comparison]) -> str:
    header = (
        "fleet",
        "strategy",
        "golden tok/s",
        "now tok/s",
        "delta",
        "delta %",
        "vs golden spread",
        "golden of",
    )
    table = [header]
    for c in rows:
        if c.golden is None:
            table.append((c.fleet, c.strategy, "-", c.now.text(), "-", "-", c.verdict, "-"))
            continue
        delta = c.now.median - c.golden.median
        share = 100 * delta / c.golden.median if c.golden.median else 0.0
        table.append(
            (
                c.fleet,
                c.strategy,
                c.golden.text(),
                c.now.text(),
                f"{delta:+.1f}",
                f"{share:+.1f}",
                c.verdict,
                c.commit,
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    below = sum(1 for c in rows if c.verdict == "BELOW")
    lines = ["against the golden figures: goodput median [min-max] over the rounds"]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]
    lines.append(f"{below} of {len(rows)} below the golden rounds' spread")
    return "\n".join(lines)
