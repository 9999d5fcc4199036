"""`bench routing`'s figures reproduced: some strategies only, golden figures written and compared,
decision logs diffed between routers, and each decision's CPU time reported and charged to the clock."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from tqdm import tqdm

from gateway.bench import virtual_time
from gateway.bench.routing import Bench
from gateway.bench.routing_decisions import DecisionEntry, TimedRouter, diverging, read_log, request_ids
from gateway.bench.routing_oracles import Strategy
from gateway.bench.routing_trace import LeastInflightRouter, stream_bodies
from gateway.bench.routing_tracefile import load_trace
from gateway.cli import main
from gateway.records import BackendSnapshot, Decision
from gateway.sim.fleet import load_fleet
from tests.bench.test_routing_suite import TINY_FLEET, TINY_TRACE, write


def bench_args(tmp_path: Path, *extra: str) -> list[str]:
    fleet = write(tmp_path, "tiny.yaml", TINY_FLEET)
    trace = write(tmp_path, "trace.yaml", TINY_TRACE)
    return ["bench", "routing", "--fleet", str(fleet), "--trace", str(trace), "--split-budget", "0", *extra]


def run_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    code = main([*bench_args(tmp_path, *extra), "--json"])
    return code, orjson.loads(capsys.readouterr().out)


def test_strategies_replays_only_those_and_searches_no_oracle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = run_json(tmp_path, capsys, "--repeats", "2", "--strategies", "adaptive,static")
    assert code == 0
    assert [(r["policy"], r["round"]) for r in document["results"]] == [
        ("static", 0),
        ("adaptive", 0),
        ("static", 1),
        ("adaptive", 1),
    ]
    assert document["replays"] == 4  # no search: the tiny fleet's oracle alone tries 2 assignments
    assert "oracle" not in document


def test_a_strategy_replayed_alone_reads_as_in_the_whole_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def adaptive(document: dict[str, Any]) -> list[tuple[int, float, float]]:
        runs = [r for r in document["results"] if r["policy"] == "adaptive"]
        return [(r["round"], r["goodput_tok_s"], r["ttft_p95_ms"]) for r in runs]

    _, whole = run_json(tmp_path, capsys, "--repeats", "2")
    _, alone = run_json(tmp_path, capsys, "--repeats", "2", "--strategies", "adaptive")
    assert whole["replays"] > alone["replays"] == 2
    assert adaptive(alone) == adaptive(whole)


def test_the_split_oracle_brings_the_oracle_it_starts_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, document = run_json(tmp_path, capsys, "--repeats", "1", "--strategies", "split_oracle")
    assert code == 0
    assert [r["policy"] for r in document["results"]] == ["oracle", "split_oracle"]
    # The oracle alone: its search (the tiny fleet's 2 assignments) and one round, no split search.
    code, document = run_json(tmp_path, capsys, "--repeats", "1", "--strategies", "oracle")
    assert code == 0 and [r["policy"] for r in document["results"]] == ["oracle"]
    assert document["replays"] == 2 + 1 and "split_oracle" not in document


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--strategies", "adaptive,clever"], "unknown strategy 'clever'"),
        (["--diff-decisions", "adaptive"], "--diff-decisions takes two strategies"),
        (["--charge-decision-cpu", "--time-scale", "20"], "needs the virtual clock"),
    ],
)
def test_a_bad_option_is_refused_before_any_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str], message: str
) -> None:
    assert main(bench_args(tmp_path, *option)) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


def test_golden_figures_are_written_then_read_back_within_their_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    golden = tmp_path / "golden.json"
    argv = bench_args(tmp_path, "--repeats", "2", "--strategies", "least_inflight,static")
    assert main([*argv, "--write-golden", str(golden)]) == 0
    entry = orjson.loads(golden.read_bytes())["fleets"]["tiny"]
    assert entry["trace"] == "tiny" and set(entry["strategies"]) == {"least_inflight", "static"}
    static = entry["strategies"]["static"]
    assert len(static["rounds"]) == 2 and static["low"] <= static["median"] <= static["high"]
    assert static["commit"]  # the code they came from
    capsys.readouterr()
    # The same code replays the same figures: every strategy within the golden spread.
    assert main([*argv, "--against", str(golden)]) == 0
    comparison = capsys.readouterr().out.split("against the golden figures")[1]
    rows = [line.split() for line in comparison.splitlines() if line.startswith("tiny ")]
    assert [(r[1], r[-2]) for r in rows] == [("least_inflight", "within"), ("static", "within")]
    assert all(r[4] == "+0.0" for r in rows)


def test_a_figure_below_its_golden_spread_is_flagged_and_fails_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    golden = tmp_path / "golden.json"
    argv = bench_args(tmp_path, "--repeats", "1", "--strategies", "static")
    assert main([*argv, "--write-golden", str(golden)]) == 0
    document = orjson.loads(golden.read_bytes())
    figures = document["fleets"]["tiny"]["strategies"]["static"]
    figures.update(low=figures["high"] + 5, median=figures["high"] + 10, high=figures["high"] + 20)
    golden.write_bytes(orjson.dumps(document))
    capsys.readouterr()
    assert main([*argv, "--against", str(golden)]) == 1
    assert "BELOW" in capsys.readouterr().out


def test_a_partial_run_updates_its_strategies_and_keeps_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    golden = tmp_path / "golden.json"
    golden.write_text('{"fleets": {"other": {"trace": "x", "strategies": {}}}}')
    for strategy in ("static", "round_robin"):
        argv = bench_args(tmp_path, "--repeats", "1", "--strategies", strategy, "--write-golden", str(golden))
        assert main(argv) == 0
    fleets = orjson.loads(golden.read_bytes())["fleets"]
    assert set(fleets) == {"other", "tiny"}
    assert set(fleets["tiny"]["strategies"]) == {"static", "round_robin"}


def test_an_unreadable_golden_file_stops_the_run_before_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    golden = write(tmp_path, "golden.json", "[1, 2")
    assert main(bench_args(tmp_path, "--against", str(golden))) == 2
    assert "cannot read golden file" in capsys.readouterr().err


def entry(order: int, request: str, backend: str) -> DecisionEntry:
    return DecisionEntry(order, request, "C", "stress", backend, 10.0)


def test_decisions_are_lined_up_by_request_not_by_order() -> None:
    a = [entry(0, "0.0.0", "x"), entry(1, "0.0.1", "y"), entry(2, "0.0.2", "x")]
    b = [entry(0, "0.0.1", "y"), entry(1, "0.0.0", "y"), entry(2, "0.0.3", "x")]  # another order
    division = diverging(a, b)
    assert division.common == 2 and (division.only_a, division.only_b) == (1, 1)
    assert [(x.request, x.backend, y.backend) for x, y in division.parted] == [("0.0.0", "x", "y")]


def test_each_decision_names_its_request_in_the_trace(tmp_path: Path) -> None:
    spec = load_fleet(write(tmp_path, "tiny.yaml", TINY_FLEET))
    trace = load_trace(write(tmp_path, "trace.yaml", TINY_TRACE))
    ids = request_ids(stream_bodies(trace, spec, "m"))
    assert sorted(ids.values()) == [f"0.0.{i}" for i in range(6)]  # six prompts, none alike


def test_two_routers_decisions_diff_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "decisions"
    argv = bench_args(
        tmp_path, "--repeats", "1", "--decisions", str(logs), "--diff-decisions", "static,round_robin"
    )
    assert main(argv) == 0
    out = capsys.readouterr().out
    static, rotation = (
        read_log(logs / "tiny" / "static.r0.jsonl"),
        read_log(logs / "tiny" / "round_robin.r0.jsonl"),
    )
    assert sorted(e.request for e in static) == [f"0.0.{i}" for i in range(6)]
    parted = sum(
        1
        for x, y in zip(sorted(static, key=_req), sorted(rotation, key=_req), strict=True)
        if x.backend != y.backend
    )
    assert parted > 0  # the static policy sends all six to one engine; rotation does not
    assert f"tiny, round 0: static vs round_robin: {parted} of 6 requests routed differently" in out
    assert (
        main(
            [
                "bench",
                "routing-diff",
                str(logs / "tiny" / "static.r0.jsonl"),
                str(logs / "tiny" / "round_robin.r0.jsonl"),
            ]
        )
        == 0
    )
    assert (
        f"static.r0 vs round_robin.r0: {parted} of 6 requests routed differently" in capsys.readouterr().out
    )


def _req(e: DecisionEntry) -> str:
    return e.request


class Burning:
    """A router that spends `cpu_s` of CPU (and `sleep_s` asleep, which is no CPU) on every decision."""

    def __init__(self, cpu_s: float, sleep_s: float = 0.0) -> None:
        self.cpu_s, self.sleep_s = cpu_s, sleep_s
        self.inner = LeastInflightRouter()

    def route(self, endpoint: str, body: dict[str, Any], backends: Sequence[BackendSnapshot]) -> Decision:
        started = time.thread_time()
        while time.thread_time() - started < self.cpu_s:
            pass
        time.sleep(self.sleep_s)
        return self.inner.route(endpoint, body, backends)


def test_a_decision_s_cpu_is_its_thread_time_and_charging_moves_the_virtual_clock() -> None:
    async def route(router: TimedRouter) -> float:
        started = virtual_time.asyncio.get_running_loop().time()
        router.route("chat", {"user": "C", "prompt": "p"}, [])
        return virtual_time.asyncio.get_running_loop().time() - started

    burning = TimedRouter(Burning(0.02, sleep_s=0.05), {"p": "0.0.0"})
    assert virtual_time.run(lambda: route(burning)) == 0  # the clock stands still while code runs
    (decision,) = burning.entries
    assert 20_000 <= decision.cpu_us < 45_000  # the 20 ms of CPU, not the 50 ms asleep
    assert decision.request == "0.0.0" and decision.cls == "C"
    charged = TimedRouter(Burning(0.02), {}, charge=True)
    moved = virtual_time.run(lambda: route(charged))
    assert moved == pytest.approx(charged.entries[0].cpu_us / 1e6, abs=1e-6) and moved >= 0.02


def replay_duration(tmp_path: Path, charge: bool) -> tuple[float, float]:
    """A replay of the tiny trace whose router spends 50 ms of CPU per decision: (makespan, CPU p50 us)."""
    spec = load_fleet(write(tmp_path, "tiny.yaml", TINY_FLEET))
    trace = load_trace(write(tmp_path, "trace.yaml", TINY_TRACE))

    async def one() -> tuple[float, float]:
        with tempfile.TemporaryDirectory() as work, tqdm(disable=True) as progress:
            bench = Bench(spec, None, Path(work), progress, trace, charge=charge)
            result = await bench.run(Strategy("burning", lambda: Burning(0.05)))
        assert result.decision_cpu is not None and result.decision_cpu.decisions == 6
        return result.duration_s, result.decision_cpu.p50_us

    return virtual_time.run(one)  # type: ignore[no-any-return]


def test_charged_decision_cpu_lengthens_the_replay_and_the_report_shows_it(tmp_path: Path) -> None:
    free, cpu = replay_duration(tmp_path, charge=False)
    charged, _ = replay_duration(tmp_path, charge=True)
    assert cpu >= 50_000
    # Three users, six requests: each user's two decisions hold up the loop, in sequence, 0.3 s in all.
    assert charged >= free + 0.2
