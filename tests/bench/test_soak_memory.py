"""The soak's memory figures: RSS after the warm-up batch, a third into the run and at the end, growth
measured from the second; with --trace, tracemalloc's traced bytes from the gateway subprocess beside
them and the sites that grew, on stderr."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from gateway.bench import soak


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    soak.register(parser.add_subparsers())
    return parser.parse_args(["soak", *argv])


def test_a_short_traced_soak_reports_traced_bytes_beside_rss(capsys: pytest.CaptureFixture[str]) -> None:
    args = _args("--engines", "2", "--streams", "10", "--requests", "60", "--max-seconds", "30", "--trace")
    result = asyncio.run(soak.soak(args))

    assert result.hung == result.lost == 0
    assert result.inflight_end == 0  # the end sample waited for the gateway to settle
    assert 0 < result.rss_start_mb <= result.rss_warm_mb * 1.5  # a real sample, not a placeholder
    assert result.rss_growth_pct == round(
        (result.rss_end_mb - result.rss_warm_mb) / result.rss_warm_mb * 100, 1
    )
    for traced in (result.traced_start_mb, result.traced_warm_mb, result.traced_end_mb):
        assert traced is not None and 0 < traced < result.rss_end_mb  # traced bytes are part of RSS
    assert "traced growth from after the warm-up batch to the end" in capsys.readouterr().err


def test_an_untraced_soak_leaves_the_traced_figures_out() -> None:
    args = _args("--engines", "2", "--streams", "10", "--requests", "30", "--max-seconds", "30")
    result = asyncio.run(soak.soak(args))

    assert result.traced_start_mb is result.traced_warm_mb is result.traced_end_mb is None
    assert result.rss_warm_mb > 0
