"""Expected command-line failures are one clear line on stderr and an exit status, never a traceback:
missing files, invalid config, policy and fleet files, an unusable or unreachable --url."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from gateway_fakes import running_gateway, settings_for

from gateway.cli import main

REPO = Path(__file__).resolve().parents[2]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    status = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return status, err.strip().splitlines()


def _write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_serve_with_a_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "gateway.yaml"
    status, lines = _run(["serve", "--config", str(missing)], capsys)
    assert (status, lines) == (2, [f"spark-gateway: error: {missing}: No such file or directory"])


def test_serve_with_an_invalid_config_prints_its_located_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _write(tmp_path / "gateway.yaml", "port: 8080\nbackends: 3\n")
    status, lines = _run(["serve", "--config", config], capsys)
    assert status == 2 and len(lines) == 1 and lines[0].startswith(f"{config}:2: backends: ")


def test_serve_with_a_missing_policy_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.yaml"
    config = _write(tmp_path / "gateway.yaml", f"policy: {policy}\n")
    status, lines = _run(["serve", "--config", config], capsys)
    assert status == 2 and len(lines) == 1 and str(policy) in lines[0]


def test_serve_with_an_invalid_policy_names_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = _write(tmp_path / "policy.yaml", "version: 1\nprofiles: [\n")
    config = _write(tmp_path / "gateway.yaml", f"policy: {policy}\n")
    status, lines = _run(["serve", "--config", config], capsys)
    assert status == 2 and len(lines) == 1 and lines[0].startswith(f"{policy}:3: invalid YAML")


def test_serve_and_sim_with_an_unusable_fleet_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "fleet.yaml"
    status, lines = _run(["sim", "--fleet", str(missing)], capsys)
    assert (status, lines) == (2, [f"spark-gateway: error: {missing}: No such file or directory"])
    fleet = _write(tmp_path / "bad.yaml", "name: f\nengines:\n  - name: a\n")
    status, lines = _run(["serve", "--fleet", fleet], capsys)
    assert (status, lines) == (2, [f"{fleet}:3: engines.0.served_model_name: Field required"])


def test_explain_with_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "req.json"
    status, lines = _run(["explain", "--url", "http://127.0.0.1:9", str(missing)], capsys)
    assert (status, lines) == (2, [f"spark-gateway: error: {missing}: No such file or directory"])


@pytest.mark.parametrize(
    ("text", "message"),
    [("{not json", ": not JSON: "), ('["a list"]', ": a request body is a JSON object")],
)
def test_explain_with_a_file_that_is_not_a_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    request = _write(tmp_path / "req.json", text)
    status, lines = _run(["explain", "--url", "http://127.0.0.1:9", request], capsys)
    assert (
        status == 2 and len(lines) == 1 and lines[0].startswith(f"spark-gateway: error: {request}{message}")
    )


@pytest.mark.parametrize(
    ("url", "status", "message"),
    [
        ("http://127.0.0.1:9", 1, "cannot reach http://127.0.0.1:9: "),
        ("127.0.0.1:8080", 2, "--url '127.0.0.1:8080' is not an http(s) URL"),
    ],
)
def test_explain_with_an_unusable_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, status: int, message: str
) -> None:
    request = _write(tmp_path / "req.json", '{"model": "m", "messages": []}')
    got, lines = _run(["explain", "--url", url, "--timeout", "2", request], capsys)
    assert got == status and len(lines) == 1 and lines[0].startswith(f"spark-gateway: error: {message}")


async def test_explain_against_a_gateway_without_a_policy_says_why_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = _write(tmp_path / "req.json", '{"model": "m", "messages": []}')
    async with running_gateway(settings_for({"a": "http://127.0.0.1:1"}), wait_ready=False) as (url, _):
        # In a thread: the command blocks on its HTTP call while this loop serves the gateway.
        status = await asyncio.to_thread(main, ["explain", "--url", url, request])
    err = capsys.readouterr().err
    assert status == 1 and err.splitlines() == [
        "spark-gateway: error: the gateway answered 404: Unknown URL (POST /gateway/explain); GET "
        "/openapi.json lists the routes. (a gateway serves /gateway/explain only when it runs a policy)"
    ]


def test_the_installed_entry_point_prints_one_line_and_no_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "gateway.yaml"
    command = [sys.executable, "-c", "import sys; from gateway.cli import main; sys.exit(main())"]
    done = subprocess.run(
        [*command, "serve", "--config", str(missing)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"spark-gateway: error: {missing}: No such file or directory"]
