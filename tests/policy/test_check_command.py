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


# ---------------------------------------------------------------- check --config

REPO = Path(__file__).parents[2]
CONFIG = """\
backends:
  - name: spark-a
    url: http://127.0.0.1:8101
  - name: spark-b
    url: http://127.0.0.1:8102
pools:
  - model: qwen
    backends: [spark-a, spark-b]
policy: policies/spark.yaml
"""
POLICY = """\
version: 1
profiles:
  - name: long
    when:
      prompt_tokens: {gte: 8192}
    prefer: [spark-b]
  - name: default
    prefer: [spark-a, spark-b]
"""


def write_config(folder: Path, config: str = CONFIG, policy: str = POLICY) -> Path:
    (folder / "policies").mkdir()
    (folder / "policies" / "spark.yaml").write_text(policy)
    path = folder / "gateway.yaml"
    path.write_text(config)
    return path


def test_check_config_passes_the_example_config_with_an_ok_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    example = REPO / "deploy" / "gateway.example.yaml"
    assert main(["check", "--config", str(example)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.startswith(f"{example}: ok: 2 backends, 1 pool, policy ")
    assert "spark-mtp-split.yaml" in captured.out


def test_check_config_fails_a_policy_preferring_a_backend_the_config_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, policy=POLICY.replace("prefer: [spark-b]", "prefer: [vllm-mtp]"))
    assert main(["check", "--config", str(config)]) == 1
    captured = capsys.readouterr()
    policy = tmp_path / "policies" / "spark.yaml"  # relative to the config's folder
    assert captured.err.splitlines() == [
        f"{policy}:6: profiles.0.prefer.0: unknown backend 'vllm-mtp'; did you mean 'spark-a'? "
        "(backends: spark-a, spark-b)"
    ]
    assert captured.out == ""


def test_check_config_prints_warnings_but_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spare = CONFIG.replace("pools:", "  - name: spare\n    url: http://127.0.0.1:8103\npools:")
    config = write_config(tmp_path, config=spare)
    assert main(["check", "--config", str(config)]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"{config}:6: warning: backends.2: backend 'spare' is in no pool, so no request can reach it"
    ]
    assert captured.out.startswith(f"{config}: ok: 3 backends, 1 pool")


def test_check_config_reports_a_config_error_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path, config=CONFIG.replace("backends: [spark-a, spark-b]", "backends: [spark-c]")
    )
    assert main(["check", "--config", str(config)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{config}:8: pools.0.backends.0: pool 'qwen' names unknown backend 'spark-c'"
    ]


def test_check_without_files_or_config_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check"]) == 2
    assert "--config" in capsys.readouterr().err


def test_check_config_lists_errors_in_line_order_with_one_unknown_key_wording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # pydantic reports `backends` before `port` (field order); the file has them the other way round.
    config = tmp_path / "gateway.yaml"
    config.write_text("portt: 9000\n" + CONFIG.replace("    url: http://127.0.0.1:8102\n", "    urll: x\n"))
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "spark.yaml").write_text(POLICY)
    assert main(["check", "--config", str(config)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    lines = [int(line.split(":")[1]) for line in err]
    assert lines == sorted(lines) and len(lines) >= 2, err
    unknown = [line for line in err if "portt" in line or "urll" in line]
    assert len(unknown) == 2 and all("unknown field (check the spelling" in line for line in unknown), err


def test_check_lists_a_policys_errors_in_line_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # pydantic reports `version` before `profiles` (field order); the file has them the other way round.
    policy = tmp_path / "p.yaml"
    policy.write_text("profiles:\n  - name: default\n    prefers: [x]\nversion: 7\n")
    assert main(["check", str(policy)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert [line.split(":")[1] for line in err] == ["3", "4"], err
