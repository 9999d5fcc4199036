"""`bench routing --fleets`: fleet entries, bodies built before the replay, the must-show checks, and
several fleets (in worker processes) ending in one summary."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from tqdm import tqdm

import gateway.bench.routing_trace as routing_trace
from gateway.bench.routing import Bench
from gateway.bench.routing_oracles import Strategy
from gateway.bench.routing_report import FaultFigures, StrategyResult, must_show, phase_lines, render_summary
from gateway.bench.routing_suite import EntryError, parse_entry
from gateway.bench.routing_trace import LeastInflightRouter, stream_bodies
from gateway.bench.routing_tracefile import load_trace
from gateway.cli import main
from gateway.sim.fleet import load_fleet

# Two tiny engines on two devices, named as the shipped policy file names them (so static and adaptive
# run too), and a trace of a few short requests: a replay takes well under a second.
TINY_FLEET = """
name: tiny
policy: policies/spark-pair-mtp-rejected.yaml
devices: {d1: {}, d2: {}}
engines:
  - {name: plain, served_model_name: m, context_length: 4096, device: d1, perf: {kv_capacity_tokens: 20000}}
  - name: mtp-weak
    served_model_name: m
    context_length: 4096
    device: d2
    perf: {kv_capacity_tokens: 20000, bytes_per_weight: 2.0}
"""
TINY_TRACE = """
name: tiny
classes:
  short: {prompt_tokens: 96, max_tokens: 24}
phases:
  - [{class: short, users: 3, requests: 6}]
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_fleet_entry_takes_its_own_trace_and_time_scale_else_the_defaults() -> None:
    default = Path("t.yaml")
    assert parse_entry("f.yaml", default, 50.0) == (Path("f.yaml"), default, 50.0)
    assert parse_entry("f.yaml,time-scale=20", None, 50.0) == (Path("f.yaml"), None, 20.0)
    assert parse_entry("f.yaml,trace=x.yaml,time-scale=2.5", default, 50.0) == (
        Path("f.yaml"),
        Path("x.yaml"),
        2.5,
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (",time-scale=20", "no fleet file"),
        ("f.yaml,scale=20", "unknown option 'scale'"),
        ("f.yaml,trace", "'trace' is not KEY=VALUE"),
        ("f.yaml,time-scale=fast", "time-scale must be a positive number"),
        ("f.yaml,time-scale=0", "time-scale must be a positive number"),
    ],
)
def test_a_bad_fleet_entry_is_refused_saying_why(entry: str, message: str) -> None:
    with pytest.raises(EntryError, match=message):
        parse_entry(entry, None, 50.0)


def test_the_cli_refuses_a_bad_entry_before_any_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = write(tmp_path, "fleet.yaml", TINY_FLEET)
    assert main(["bench", "routing", "--fleets", str(fleet), f"{fleet},time-scale=-1"]) == 2
    err = capsys.readouterr().err
    assert "time-scale must be a positive number" in err and "Traceback" not in err


async def test_replays_send_bodies_built_before_they_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_fleet(write(tmp_path, "fleet.yaml", TINY_FLEET))
    trace = load_trace(write(tmp_path, "trace.yaml", TINY_TRACE))
    with tempfile.TemporaryDirectory() as work, tqdm(disable=True) as progress:
        bench = Bench(spec, 50.0, Path(work), progress, trace)
        assert bench.bodies == stream_bodies(trace, bench.spec, bench.model)  # the same prompts every time
        assert len({body for bodies in bench.bodies.values() for body in bodies}) == trace.requests()

        def no_prompts_now(*args: object, **kwargs: object) -> None:
            raise AssertionError("a prompt was built during the replay")

        monkeypatch.setattr(routing_trace, "request_body", no_prompts_now)
        result = await bench.run(Strategy("least_inflight", LeastInflightRouter))
    assert result.requests == trace.requests() and result.failures == 0
    # One phase: its simulated seconds are the replay's.
    assert len(result.phases_s) == 1 and result.phases_s[0] == pytest.approx(result.duration_s, abs=0.2)


def result(
    policy: str, goodput: float, ttft_p95: float = 1000.0, round_: int = 0, faults: FaultFigures | None = None
) -> StrategyResult:
    return StrategyResult(policy, goodput, None, ttft_p95, 0, 0, 10, 1.0, round=round_, faults=faults)


def a_round(
    round_: int, adaptive: float, adaptive_ttft: float, faults: FaultFigures | None = None
) -> list[StrategyResult]:
    return [
        result("round_robin", 90, round_=round_),
        result("least_inflight", 100, round_=round_),
        result("static", 95, round_=round_),
        result("adaptive", adaptive, adaptive_ttft, round_, faults),
        result("oracle", 98, round_=round_),
        result("split_oracle", 104, 800.0, round_),
    ]


def test_must_show_checks_are_judged_on_the_median_of_ratios_within_each_round() -> None:
    results = a_round(0, 101, 900) + a_round(1, 99, 1000) + a_round(2, 103, 1100)
    checks = {c.name: c for c in must_show(results)}
    assert set(checks) == {"vs best blind %", "% of split", "TTFT p95 vs best %"}
    blind = checks["vs best blind %"]
    assert blind.spread is not None and (blind.spread.median, blind.spread.low) == (101.0, 99.0)
    assert blind.holds  # one round below 100 does not decide it: the median does
    split = checks["% of split"]
    assert split.spread is not None and split.spread.median == pytest.approx(100 * 101 / 104)
    assert split.holds  # 97.1 % >= 95 %
    ttft = checks["TTFT p95 vs best %"]  # the best by goodput is the split oracle, TTFT p95 800 ms
    assert ttft.spread is not None and ttft.spread.median == pytest.approx(125.0)
    assert ttft.holds is False


def test_fault_fleets_add_their_checks_and_no_content_failures_count_in_any_round() -> None:
    slowed = [FaultFigures(to_slowed=n, sent_after_slowdown=60) for n in (12, 30, 18)]
    results = [r for i, f in enumerate(slowed) for r in a_round(i, 101, 900, f)]
    checks = {c.name: c for c in must_show(results)}
    assert checks["to slowed"].holds and checks["to slowed"].cell() == "18.0 [12.0-30.0] ok"
    assert checks["% of split, slowed"].holds
    crashed = [FaultFigures(crash_no_content_failures=n, crash_exposed=40) for n in (0, 1, 0)]
    results = [r for i, f in enumerate(crashed) for r in a_round(i, 101, 900, f)]
    check = {c.name: c for c in must_show(results)}["no-content fail"]
    assert check.spread is not None and check.spread.median == 0
    assert check.holds is False and check.target() == "<= 0 every round"


def test_the_summary_has_a_row_per_fleet_naming_what_fails() -> None:
    good = a_round(0, 110, 800)
    bad = a_round(0, 80, 2000)
    text = render_summary([("fleet-a x50", good), ("fleet-b x20", bad)])
    rows = {line.split()[0]: line for line in text.splitlines()[2:4]}
    assert rows["fleet-a"].endswith("none")
    assert rows["fleet-b"].endswith("vs best blind %, % of split, TTFT p95 vs best %")
    assert "80.0 NO" in rows["fleet-b"] and "110.0 ok" in rows["fleet-a"]


def test_several_fleets_run_in_worker_processes_and_end_in_one_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = write(tmp_path, "tiny.yaml", TINY_FLEET)
    trace = write(tmp_path, "trace.yaml", TINY_TRACE)
    argv = ["bench", "routing", "--fleets", str(fleet), f"{fleet},time-scale=25", "--trace", str(trace)]
    argv += ["--repeats", "1", "--split-budget", "0", "--jobs", "2", "--json"]
    assert main(argv) == 0
    fleets = orjson.loads(capsys.readouterr().out)["fleets"]
    assert [f["time_scale"] for f in fleets] == [None, 25.0]  # the virtual clock, then the wall clock
    virtual, wall = fleets
    # On the wall clock a replay lasts its simulated time over the time scale at least.
    assert wall["simulated_s"] / 25.0 <= wall["replaying_s"] <= wall["wall_s"]
    assert virtual["simulated_s"] > 0 and 0 < virtual["replaying_s"] <= virtual["wall_s"]
    for document in fleets:
        assert document["trace"] == "tiny"
        policies = [r["policy"] for r in document["results"]]
        assert policies[:5] == ["round_robin", "least_inflight", "static", "adaptive", "oracle"]
        assert document["replays"] == 2 + 5  # the oracle's 2 assignments, then a round of 5 (+ its copy)
        assert {c["name"] for c in document["checks"]} == {
            "vs best blind %",
            "% of split",
            "TTFT p95 vs best %",
        }
        assert all(isinstance(c["holds"], bool) for c in document["checks"])


def test_one_fleet_prints_its_table_its_timing_and_a_summary_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = write(tmp_path, "tiny.yaml", TINY_FLEET)
    trace = write(tmp_path, "trace.yaml", TINY_TRACE)
    argv = ["bench", "routing", "--fleet", str(fleet), "--trace", str(trace), "--repeats", "1"]
    assert main([*argv, "--split-budget", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fleet tiny, trace tiny: 6 requests per replay, 1 round(s)")
    assert "wall " in out and "for 7 replays (searches included)" in out
    summary = out[out.index("\nsummary, 1 round(s) per fleet") :].splitlines()
    assert summary[3].startswith("tiny tiny virtual clock ")  # the header, then the fleet's row
    assert summary[4].startswith(
        "targets: vs best blind % >= 100; % of split >= 95; TTFT p95 vs best % <= 120"
    )


def test_phases_print_each_strategys_median_seconds_per_phase_of_the_trace() -> None:
    stream = routing_trace.Stream
    mixed = tuple(stream(c, 1, 1) for c in "ABC")
    phases = ((stream("A", 1, 2),), (stream("D", 1, 2), stream("image", 1, 1)), mixed)
    trace = routing_trace.Trace(routing_trace.CLASSES, phases)
    runs = [
        replace(result("least_inflight", 100, round_=r), phases_s=seconds)
        for r, seconds in enumerate([(10.0, 20.0, 30.0), (12.0, 22.0, 31.0), (11.0, 40.0, 29.0)])
    ]
    runs.append(replace(result("adaptive", 100), phases_s=(1.0, 2.0)))  # not this trace's phases: left out
    assert phase_lines(runs, trace) == [
        "phases, simulated s (median over rounds): A | D+image | mixed",
        "  least_inflight  11.0 | 22.0 | 30.0",
    ]
    assert phase_lines([result("least_inflight", 100)], trace) == []  # replays without phases
