"""The variant fleets `bench routing` is judged on besides the shipped ones (deploy/fleets/variants)."""

from __future__ import annotations

import glob
import tomllib
from pathlib import Path

import pytest

from gateway.sim.fleet import load_fleet

REPO = Path(__file__).resolve().parents[2]
VARIANTS = sorted((REPO / "deploy" / "fleets" / "variants").glob("*.yaml"))


def _source(path: Path) -> Path:
    """The shipped fleet a variant was made from, as its first line names it."""
    first = path.read_text().splitlines()[0]
    name = first.split("deploy/fleets/", 1)[1].split(",", 1)[0]
    return REPO / "deploy" / "fleets" / name


def test_there_are_the_eleven_variants_and_none_is_a_shipped_fleet() -> None:
    assert len(VARIANTS) == 11
    data_files = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    shipped = {
        Path(p).resolve()
        for pattern in data_files.values()
        for g in pattern
        for p in glob.glob(str(REPO / g))
    }
    assert shipped and not shipped & {v.resolve() for v in VARIANTS}


@pytest.mark.parametrize("path", VARIANTS, ids=lambda p: p.stem)
def test_a_variant_loads_and_keeps_its_shipped_fleet_s_engines_and_policy(path: Path) -> None:
    variant, source = load_fleet(path), load_fleet(_source(path))
    assert variant.name == path.stem
    assert variant.policy == source.policy
    assert [e.name for e in variant.engines] == [e.name for e in source.engines]
    # Only where the engines run and their faults differ from the shipped fleet's.
    for mine, theirs in zip(variant.engines, source.engines, strict=True):
        assert mine.perf == theirs.perf and mine.seed == theirs.seed
    assert variant != source
