"""`spark-gateway explain --url URL FILE` against a small local HTTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import main
from gateway.policy.load import load_policy
from gateway.records import BackendSnapshot
from gateway.routing.pipeline.policy_source import FixedPolicy
from gateway.routing.pipeline.router import PolicyRouter

POLICY = Path(__file__).parents[2] / "policies" / "spark-home.yaml"
POOL = [
    BackendSnapshot("q475-dflash", context_length=65536),
    BackendSnapshot("fp8-vision", context_length=65536, modalities=frozenset({"text", "image"})),
]


@pytest.fixture
def gateway_url() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    router = PolicyRouter(FixedPolicy(load_policy(POLICY)))
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            received.append({"path": self.path, "body": dict(body)})
            endpoint = body.pop("endpoint", "chat")
            payload = json.dumps(router.explain(endpoint, body, POOL)).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_explain_prints_a_readable_table(
    gateway_url: tuple[str, list[dict[str, Any]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, received = gateway_url
    request = tmp_path / "req.json"
    content = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:,"}},
    ]
    request.write_text(json.dumps({"model": "qwen", "messages": [{"role": "user", "content": content}]}))
    assert main(["explain", "--url", url, "--endpoint", "chat", str(request)]) == 0
    out = capsys.readouterr().out
    assert received[0]["path"] == "/gateway/explain" and received[0]["body"]["endpoint"] == "chat"
    assert "profile   vision (adaptive, objective ttft)" in out
    assert "BACKEND      ELIGIBLE  SCORE  PREFERENCE  LOAD   REASON" in out
    assert "q475-dflash  no        -      -           -      modality: cannot take image input" in out
    assert "chosen    fp8-vision (failover: none)" in out


def test_explain_fails_cleanly_when_the_gateway_is_unreachable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = tmp_path / "req.json"
    request.write_text('{"model": "qwen", "prompt": "x"}')
    assert main(["explain", "--url", "http://127.0.0.1:9", "--timeout", "2", str(request)]) == 1
    assert "cannot reach" in capsys.readouterr().err
