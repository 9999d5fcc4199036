"""deploy/engines.example.yaml: valid, and three engines that do not all fit their device at once."""

from __future__ import annotations

from pathlib import Path

from gateway.cli import main
from gateway.settings import load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "engines.example.yaml"


def test_the_example_passes_check() -> None:
    assert main(["check", "--config", str(EXAMPLE)]) == 0


def test_the_examples_three_engines_compete_for_their_device() -> None:
    settings = load_config(EXAMPLE).settings
    budget = settings.devices["spark"].memory_gib
    footprints = [e.memory_gib for e in settings.engines if e.device == "spark"]
    assert len(footprints) == 3 and budget == 119
    assert sum(footprints) > budget  # not all three at once
    assert all(a + b <= budget for i, a in enumerate(footprints) for b in footprints[i + 1 :])  # any two
