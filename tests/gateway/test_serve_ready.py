"""`spark-gateway serve` as a newcomer runs it: it says `ready` only when a request is served at once
(the built-in fleet starts loaded, so within seconds), and counts a fleet's warm-up down until then."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

REPO_FLEET = "deploy/fleets/spark-duo-35b.yaml"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _serving(*args: str) -> Iterator[tuple[int, list[str]]]:
    """`serve` on a free port until its `ready` line (at most 60 s); the lines it logged before it."""
    port = _free_port()
    command = [sys.executable, "-m", "gateway", "serve", "--port", str(port), *args]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 60
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if "gateway.serve: ready:" in line or time.monotonic() > deadline:
                break
        assert "ready:" in seen[-1], seen
        yield port, seen
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _chat(port: int, timeout_s: float) -> int:
    body = {
        "model": "Qwen/Qwen3.6-35B-A3B-FP8",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}],
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json.dumps(body).encode(),
        {"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return int(response.status)


def test_the_first_chat_after_ready_is_answered_within_3s() -> None:
    with _serving() as (port, _):
        assert _chat(port, timeout_s=3.0) == 200  # a client with a short timeout gets its answer


def test_a_warming_fleet_is_counted_down_before_ready() -> None:
    # The fleet file's 5-minute simulated warm-up at 100x: 3 s of wall time.
    with _serving("--fleet", REPO_FLEET, "--time-scale", "100") as (port, seen):
        countdown = [line for line in seen if "not ready yet" in line]
        assert countdown and "warming up, expected ready in ~" in countdown[0], seen
        assert _chat(port, timeout_s=3.0) == 200
