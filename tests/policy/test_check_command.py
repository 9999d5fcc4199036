"""`spark-gateway check` and `spark-gateway schema`."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main

POLICIES = sorted((Path(__file__).parents[2] / "policies").glob("*.yaml"))


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_check_passes_every_shipped_policy_with_a_one_line_summary(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith(f"{path}: ok: version 1")


def test_check_fails_a_broken_policy_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "x.yaml"
    text = (Path(__file__).parents[2] / "policies" / "spark-mtp-split.yaml").read_text()
    broken.write_text(text.replace("objective: tokens_per_second", "objective: fastest", 1))
    line = text.splitlines().index("    objective: tokens_per_second") + 1
    assert main(["check", str(broken)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"{broken}:{line}: profiles.0.objective: Input should be")


def test_check_reports_every_file_and_fails_if_any_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "y.yaml"
    broken.write_text("version: 1\nprofiles: []\n")
    assert main(["check", str(POLICIES[0]), str(broken)]) == 1
    captured = capsys.readouterr()
    assert ": ok:" in captured.out and f"{broken}:2: profiles:" in captured.err
