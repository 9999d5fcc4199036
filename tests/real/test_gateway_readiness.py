"""The gateway started before a real llama-server: while the engine answers 503 "Loading model" the
gateway keeps it out of routing (its own 503, or the request waits in the pool's queue, depending on
whether admission waiting is wired); the engine's loading 503 never reaches a client."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from engine_fleet import COMMON_ARGS
from engine_http import RawResponse, post
from gateway_harness import FAST_PROBE, backend_states, serving
from llama_build import BuiltServer
from llama_process import STOP_GRACE_S, _spawn, free_port
from real_prompts import FREE_PROMPT, chat

from gateway.settings import load_settings

pytestmark = pytest.mark.real

LATE = "late"
DEADLINE_S = 60.0


@dataclass
class Watch:
    """The gateway's view of the engine (`status: detail`, in order), polled in a thread from the spawn."""

    port: int
    details: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            state = backend_states(self.port)[LATE]
            detail = f"{state['status']}: {state['detail']}"
            if not self.details or self.details[-1] != detail:
                self.details.append(detail)
            time.sleep(0.005)

    def status(self) -> str:
        return self.details[-1].split(":", 1)[0] if self.details else "unknown"


def _until_answered(port: int, watch: Watch) -> tuple[list[RawResponse], list[str]]:
    """Send requests until one is answered; returns every response and the gateway's status at each send."""
    responses: list[RawResponse] = []
    seen_at_send: list[str] = []
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        seen_at_send.append(watch.status())
        responses.append(post(port, "/v1/chat/completions", chat(FREE_PROMPT, max_tokens=2, model=LATE)))
        if responses[-1].status == 200:
            return responses, seen_at_send
        time.sleep(0.005)
    raise AssertionError(f"no answer within {DEADLINE_S:.0f}s: {watch.details}")


def test_requests_are_routed_only_once_the_engine_has_loaded(
    llama_server_build: BuiltServer, gemma_gguf: Path, gateway_policy: Path, tmp_path: Path
) -> None:
    port = free_port()
    settings = load_settings(
        None,
        backends=[{"name": LATE, "url": f"http://127.0.0.1:{port}", "flavor": "llamacpp"}],
        pools=[{"model": LATE, "backends": [LATE]}],
        policy=gateway_policy,
        probe=FAST_PROBE,
    )
    with serving(settings) as running:
        assert backend_states(running.port)[LATE]["status"] in {"unknown", "starting"}
        process = _spawn(
            llama_server_build.binary, ["--model", str(gemma_gguf), *COMMON_ARGS], port, tmp_path / "late.log"
        )
        watch = Watch(running.port)
        watcher = threading.Thread(target=watch.run, daemon=True)
        watcher.start()
        try:
            # The first request goes out once the gateway has seen the engine loading.
            deadline = time.monotonic() + DEADLINE_S
            while not any("/health -> 503" in d for d in watch.details):
                assert process.poll() is None and time.monotonic() < deadline, watch.details
                time.sleep(0.001)
            responses, seen_at_send = _until_answered(running.port, watch)
        finally:
            watch.stop.set()
            watcher.join(timeout=5)
            process.terminate()
            process.wait(timeout=STOP_GRACE_S)
    assert any(d.startswith("starting: /health -> 503") for d in watch.details), watch.details
    assert watch.details[-1].startswith("ready"), watch.details
    assert seen_at_send[0] == "starting", "the first request was sent while the engine was loading"
    refusals = [r.json()["error"] for r in responses if r.status != 200]
    assert all(r.status in (200, 503) for r in responses)
    codes = {"no_ready_backend", "backends_warming"}  # the latter after a warming wait
    assert all(e["code"] in codes and "Loading model" not in e["message"] for e in refusals)
    assert responses[-1].headers["x-gateway-backend"] == LATE
