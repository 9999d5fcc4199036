"""`bench routing`: trace files, the split oracle, and the figures fault fleets report."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from tqdm import tqdm

from gateway.bench.routing import Bench, fault_figures
from gateway.bench.routing_oracles import find_oracle, find_split_oracle
from gateway.bench.routing_report import StrategyResult, best_per_round, paired, share_of_best
from gateway.bench.routing_trace import (
    LeastInflightRouter,
    Outcome,
    RoundRobinRouter,
    SplitRouter,
    request_body,
)
from gateway.bench.routing_tracefile import TraceError, load_trace
from gateway.cli import main
from gateway.records import BackendSnapshot
from gateway.repetition import prompt_repetition
from gateway.sim.fleet import FleetSpec, load_fleet

REPO = Path(__file__).resolve().parents[2]
BACKENDS = [BackendSnapshot(name="a"), BackendSnapshot(name="b"), BackendSnapshot(name="c")]

# Two small engines on two devices, one faster: a class may be best spread over both.
SMALL_FLEET = """
name: small
devices: {d1: {}, d2: {}}
engines:
  - {name: fast, served_model_name: m, context_length: 4096, device: d1, perf: {kv_capacity_tokens: 20000}}
  - name: slow
    served_model_name: m
    context_length: 4096
    device: d2
    perf: {kv_capacity_tokens: 20000, bytes_per_weight: 2.0}
"""
SMALL_TRACE = """
name: small
classes:
  short: {prompt_tokens: 128, max_tokens: 48}
  quoted: {prompt_tokens: 256, max_tokens: 48, endpoint: chat, content: repetitive}
phases:
  - [{class: short, users: 6, requests: 12}, {class: quoted, rate_per_s: 4, requests: 4}]
"""


def test_blind_strategies_pick_only_among_backends_that_can_take_the_class() -> None:
    capable = {"long": ["a", "c"], "nowhere": []}
    busy = [
        BackendSnapshot(name="a", inflight=3),
        BackendSnapshot(name="b"),
        BackendSnapshot(name="c", inflight=1),
    ]
    least = LeastInflightRouter(capable)
    assert least.route("completions", {"user": "long"}, busy).ranked == ("c", "a")
    # A class no backend can take, or one the map does not know, is routed over the whole pool.
    assert least.route("completions", {"user": "nowhere"}, busy).ranked[0] == "b"
    assert least.route("completions", {"user": "other"}, busy).ranked[0] == "b"
    rotation = RoundRobinRouter(capable)
    firsts = [rotation.route("completions", {"user": "long"}, BACKENDS).ranked[0] for _ in range(4)]
    assert firsts == ["a", "c", "a", "c"]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_shipped_trace_loads_with_both_kinds_of_content_and_arrival() -> None:
    trace = load_trace(REPO / "deploy/traces/mixed-content.yaml")
    assert trace.name == "mixed-content"
    assert {c.repeat > 0 for c in trace.classes.values()} == {True, False}
    assert any(not c.stream for c in trace.classes.values())
    streams = [s for phase in trace.phases for s in phase]
    assert any(s.users for s in streams) and any(s.arrival_offsets() for s in streams)
    assert trace.requests() == sum(s.requests for s in streams)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "classes: {a: {prompt_tokens: 8, max_tokens: 8}}\nphases: [[{class: b, users: 1, requests: 1}]]",
            "phases: Value error, phase 0 names class 'b'; classes: a",
        ),
        (
            "classes: {a: {prompt_tokens: 8, max_tokens: 8}}\nphases: [[{class: a, users: 1, rate_per_s: 2, "
            "requests: 1}]]",
            "give exactly one of users, rate_per_s, arrivals_s",
        ),
        (
            "classes: {a: {prompt_tokens: 8, max_tokens: 8}}\n"
            "phases: [[{class: a, arrivals_s: [1], requests: 3}]]",
            "3 requests but only 1 arrivals_s",
        ),
        (
            "classes: {a: {prompt_tokens: 8, max_tokens: 8, image: true}}\nphases: [[{class: a, users: 1, "
            "requests: 1}]]",
            "classes.a: Value error, image requests need endpoint: chat",
        ),
        (
            "classes: {a: {prompt_tokens: 8, max_tokens: 8, content: poetry}}\n"
            "phases: [[{class: a, users: 1, requests: 1}]]",
            "classes.a.content: Input should be 'novel' or 'repetitive'",
        ),
        (
            "classes: {a: {prompt_tokens: 8, max_tokens: 8}}\nphases: []",
            "phases: List should have at least 1",
        ),
        ("classes: [a\nphases:", "invalid YAML"),
    ],
)
def test_a_bad_trace_file_is_refused_naming_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert any(line.startswith(f"{path}") and message in line for line in caught.value.lines), (
        caught.value.lines
    )


def test_the_cli_reports_a_bad_trace_as_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "bad.yaml", "classes: {}\nphases: []\n")
    code = main(
        ["bench", "routing", "--fleet", str(REPO / "deploy/fleets/spark-duo-35b.yaml"), "--trace", str(path)]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert f"{path}:1: classes: Dictionary should have at least 1 item" in err
    assert "Traceback" not in err


def test_repetitive_classes_build_prompts_that_repeat_and_novel_ones_that_do_not() -> None:
    trace = load_trace(REPO / "deploy/traces/mixed-content.yaml")
    for cls in trace.classes.values():
        body = request_body(cls, "m", 1024, seed=3)
        share = prompt_repetition(body.get("messages"), body.get("prompt"))
        assert share == pytest.approx(cls.repeat, abs=0.05), cls.name
        assert body["stream"] is cls.stream


def test_split_router_interleaves_a_class_by_its_fractions() -> None:
    router = SplitRouter({"x": {"a": 0.75, "b": 0.25}, "y": {"c": 1.0}})
    picks = [router.route("chat", {"user": "x"}, BACKENDS).ranked[0] for _ in range(8)]
    assert picks.count("a") == 6 and picks.count("b") == 2
    assert "b" not in picks[:2] and picks[:4].count("b") == 1  # spread out, not bunched
    assert router.route("chat", {"user": "y"}, BACKENDS).ranked == ("c", "a", "b")


async def test_split_oracle_is_at_least_the_assignment_oracle_on_a_small_fleet(tmp_path: Path) -> None:
    spec: FleetSpec = load_fleet(write(tmp_path, "fleet.yaml", SMALL_FLEET))
    trace = load_trace(write(tmp_path, "trace.yaml", SMALL_TRACE))
    with tempfile.TemporaryDirectory() as work, tqdm(disable=True) as progress:
        bench = Bench(spec, 50.0, Path(work), progress, trace)
        oracle = await find_oracle(bench)
        split = await find_split_oracle(bench, oracle, budget=3)
    assert oracle.tried == 4  # both classes, both engines: every assignment
    assert 1 <= split.tried <= 3
    assert split.goodput >= oracle.goodput > 0
    assert split.strategy.name == "split_oracle" and "->" in split.strategy.detail


def outcome(backend: str, sent_at: float, ok: bool = True, ttft: float | None = 0.5) -> Outcome:
    return Outcome(
        "A", 200 if ok else 502, ttft if ok else ttft, 2.0, 10, "" if ok else "boom", backend, sent_at
    )


def test_fault_figures_count_requests_to_the_slowed_engine_after_its_slowdown() -> None:
    spec = load_fleet(REPO / "deploy/fleets/spark-duo-degrading.yaml")
    at = spec.engine("fp8-mtp").faults.slowdown_at_s
    assert at is not None
    outcomes = [
        outcome("fp8-mtp", at - 1),
        outcome("fp8-mtp", at),
        outcome("fp8-mtp", at + 5),
        outcome("fp8-base", at + 5),
    ]
    figures = fault_figures(spec, outcomes)
    assert figures is not None and figures.crash_no_content_failures is None
    assert (figures.to_slowed, figures.sent_after_slowdown) == (2, 3)


def test_fault_figures_count_failures_without_content_around_a_crash() -> None:
    spec = load_fleet(REPO / "deploy/fleets/spark-duo-crash.yaml")
    at = spec.engine("fp8-mtp").faults.crash_at_s
    assert at is not None
    outcomes = [
        outcome("fp8-mtp", at - 10, ok=False, ttft=None),  # ended before the crash: not exposed
        outcome("fp8-mtp", at - 1, ok=False, ttft=None),  # running at the crash, no content: counts
        outcome("fp8-mtp", at - 1, ok=False, ttft=0.3),  # had content when cut: a lost stream
        outcome("fp8-base", at + 1),
    ]
    figures = fault_figures(spec, outcomes)
    assert figures is not None and figures.to_slowed is None
    assert (figures.crash_no_content_failures, figures.crash_exposed) == (1, 3)
    assert fault_figures(load_fleet(REPO / "deploy/fleets/spark-duo-35b.yaml"), outcomes) is None


def result(policy: str, goodput: float, round_: int = 0) -> StrategyResult:
    return StrategyResult(policy, goodput, None, None, 0, 0, 10, 1.0, round=round_)


def test_adaptive_is_reported_against_the_best_strategy_of_each_round() -> None:
    results = [
        result("adaptive", 90),
        result("least_inflight", 120),
        result("split_oracle", 100),
        result("adaptive", 100, 1),
        result("least_inflight", 95, 1),
        result("split_oracle", 125, 1),
    ]
    assert best_per_round(results) == ["least_inflight", "split_oracle"]
    spread = paired(results, "adaptive", share_of_best("adaptive"))
    assert spread is not None
    assert (spread.low, spread.high) == pytest.approx((75.0, 80.0))
