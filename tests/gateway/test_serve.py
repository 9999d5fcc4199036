"""`spark-gateway serve` with no arguments but a free port: the default twin fleet answers a streamed
chat request from the openai client, and /metrics shows it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.commands.serve import settings_for_fleet
from gateway.settings import default_state_dir
from gateway.sim.fleet import load_fleet
from gateway.stats.snapshot import FILE_NAME, FORMAT_VERSION

REPO = Path(__file__).resolve().parents[2]
FLEET = REPO / "deploy/fleets/spark-duo-35b.yaml"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def served() -> Iterator[str]:
    port = _free_port()
    command = [sys.executable, "-m", "gateway", "serve", "--port", str(port)]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90  # the twin's 300 s simulated warm-up at the default time scale
        while True:
            assert process.poll() is None, process.communicate()[0]
            try:
                if _get(url + "/ready")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the gateway never became ready"
            time.sleep(0.5)
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            out, _ = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
        print(out)


def test_serve_without_arguments_answers_a_streamed_chat_and_counts_it(served: str) -> None:
    model = load_fleet(FLEET).engines[0].served_model_name
    with openai.OpenAI(base_url=served + "/v1", api_key="unused") as client:
        stream = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=8, stream=True
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text
    status, metrics = _get(served + "/metrics")
    assert status == 200
    counted = [
        sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "gateway_requests_total" and sample.labels["model"] == model
    ]
    assert counted == [1.0]
    assert "gateway_ttft_seconds_count" in metrics


def test_fleet_settings_make_one_pool_per_served_model_with_declared_vision() -> None:
    spec = load_fleet(FLEET)
    settings = settings_for_fleet(
        spec, {e.name: f"http://127.0.0.1:{9000 + i}" for i, e in enumerate(spec.engines)}
    )
    assert [(p.model, p.backends) for p in settings.pools] == [
        (spec.engines[0].served_model_name, tuple(e.name for e in spec.engines))
    ]
    assert all(b.modalities == frozenset({"text", "image"}) for b in settings.backends)
    assert settings.policy is not None and settings.policy.exists()


def test_serve_reports_a_bad_config_with_its_line(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("backends:\n  - name: a\n    url: ftp://x\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_GATEWAY_")}
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2
    assert f"{config}:3: backends.0.url" in done.stderr


def _tree(root: Path) -> dict[str, tuple[bytes, int] | None]:
    """Every folder (None) and file (its bytes and mtime) under root, by relative path."""
    tree: dict[str, tuple[bytes, int] | None] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        tree[key] = (path.read_bytes(), path.stat().st_mtime_ns) if path.is_file() else None
    return tree


def _real_state(home: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """A real gateway's state under `home`: the example config's own folder, and the single folder every
    gateway shared before state was kept per config."""
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME")
    folders = [default_state_dir(REPO / "deploy/gateway.example.yaml"), home / ".cache" / "spark-gateway"]
    spark = {"name": "fp8-mtp", "url": "http://127.0.0.1:8102", "served": ["Qwen/Qwen3.6-35B-A3B-FP8"]}
    sample = {"at": time.time() - 5, "e2e": 2.0, "output_tokens": 64, "prompt_tokens": 512, "concurrency": 1}
    cells = [{"backend": spark, "profile": "default", "samples": [sample]}]
    document = json.dumps({"version": FORMAT_VERSION, "saved_at": time.time(), "cells": cells})
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / FILE_NAME).write_text(document)
    return folders


def test_a_twin_run_leaves_a_real_gateways_state_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    cwd.mkdir()
    folders = _real_state(home, monkeypatch)
    before = _tree(home)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("SPARK_GATEWAY_") and k != "XDG_CACHE_HOME"
    }
    port = _free_port()
    command = [sys.executable, "-m", "gateway", "serve", "--fleet", str(FLEET), "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--time-scale", "100"],
        cwd=cwd,
        env={**env, "HOME": str(home), "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(process, url)
        model = load_fleet(FLEET).engines[0].served_model_name
        with openai.OpenAI(base_url=url + "/v1", api_key="unused") as client:  # a sample worth saving
            client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4
            )
    finally:
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
    # The normal shutdown ran, the one that saves a gateway's state (uvicorn then re-raises the SIGINT).
    assert "Application shutdown complete" in out, out
    assert _tree(home) == before, out
    assert list(cwd.iterdir()) == []
    assert all((folder / FILE_NAME).exists() for folder in folders)


def _wait_ready(process: subprocess.Popen[str], url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.poll() is None, process.communicate()[0]
        try:
            if _get(url + "/ready")[0] == 200:
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, "the gateway never became ready"
        time.sleep(0.2)
