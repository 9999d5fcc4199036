"""Every committed fleet replayed with adaptive routing, one round on the virtual clock, against the golden
figures in docs/routing-golden.json: a change that costs a fleet more than 1 % below its golden rounds'
lowest fails here, before anyone reads a figure off a stale table. A round on the virtual clock replays to
the request; a change meant to move the figures writes them anew (`bench routing --fleets ... --repeats 3
--write-golden docs/routing-golden.json`, docs/measurement.md)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from gateway.cli import main

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "docs" / "routing-golden.json"
FLEETS = REPO / "deploy" / "fleets"
# Fleets replayed on a trace of their own; the others on the built-in one.
TRACES = {"spark-pair-spec-content": REPO / "deploy" / "traces" / "mixed-content.yaml"}
TOLERANCE = 0.01


def entries() -> list[str]:
    files = sorted(FLEETS.glob("*.yaml")) + sorted((FLEETS / "variants").glob("*.yaml"))
    return [f"{f},trace={TRACES[f.stem]}" if f.stem in TRACES else str(f) for f in files]


@pytest.mark.slow
def test_adaptive_routing_holds_its_golden_figures_on_every_committed_fleet(
    capsys: pytest.CaptureFixture[str],
) -> None:
    fleets = entries()
    code = main(["bench", "routing", "--jobs", "2", "--repeats", "1", "--strategies", "adaptive", "--json",
                 "--fleets", *fleets])  # fmt: skip
    assert code == 0
    replayed = orjson.loads(capsys.readouterr().out)["fleets"]
    golden = json.loads(GOLDEN.read_text())["fleets"]
    assert len(replayed) == len(fleets) and all(f["fleet"] in golden for f in replayed)
    below = {}
    for fleet in replayed:
        goodput = next(r["goodput_tok_s"] for r in fleet["results"] if r["policy"] == "adaptive")
        low = golden[fleet["fleet"]]["strategies"]["adaptive"]["low"]
        if goodput < low * (1 - TOLERANCE):
            below[fleet["fleet"]] = (goodput, low)
    assert not below, f"adaptive goodput below the golden rounds (now, golden low): {below}"
