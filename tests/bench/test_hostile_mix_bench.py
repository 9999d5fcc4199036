"""`spark-gateway bench hostile mix`: clean and mixed runs side by side in rounds, the order swapped every
round, each mode's median and spread, and mixed against clean as a ratio of medians beside each round's
own ratio, with the machine's load so a run on a loaded box says so."""

from __future__ import annotations

import argparse
import asyncio

from gateway.bench import hostile


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    hostile.register(parser.add_subparsers())
    return parser.parse_args(["hostile", "mix", *argv])


def test_the_ratios_are_of_the_medians_and_per_round() -> None:
    clean = [{"p99_ms": 10.0}, {"p99_ms": 20.0}, {"p99_ms": 80.0}]
    mixed = [{"p99_ms": 11.0}, {"p99_ms": 30.0}, {"p99_ms": 40.0}]
    ratios = hostile._ratios(clean, mixed, "p99_ms")
    assert ratios == {"of_medians": 1.5, "per_round": [0.5, 1.1, 1.5], "per_round_median": 1.1}


def test_a_short_mix_alternates_the_order_and_reports_medians_spreads_and_load() -> None:
    result = asyncio.run(hostile.mix(_args("--legit", "20", "--bad", "2", "--rounds", "3", "--rate", "80")))

    assert [run["position"] for run in result["clean_runs"]] == [0, 1, 0]  # ABBA...: swapped every round
    assert [run["position"] for run in result["mixed_runs"]] == [1, 0, 1]
    assert all(run["ok"] == 20 for run in result["clean_runs"] + result["mixed_runs"])
    assert result["bad_4xx_json"] == result["bad_sent"] == 6 and result["bad_5xx"] == 0
    p99 = result["p99_ms"]["clean"]
    assert p99["min"] <= p99["median"] <= p99["max"]
    assert len(result["p99_ratio"]["per_round"]) == 3
    assert result["load1"]["cores"] >= 1 and isinstance(result["loaded"], bool)
    assert all(run["gateway_cpu_ms"] >= 0 for run in result["clean_runs"])
