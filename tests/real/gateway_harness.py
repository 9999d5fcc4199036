"""The gateway in front of real llama-server instances: Settings for the pair, and an in-process gateway
served by uvicorn on an ephemeral 127.0.0.1 port in a background thread.

The real-engine tests are synchronous (blocking clients, the sync openai client), so the gateway gets its
own thread and event loop; the tests talk to it over HTTP like any client would.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from gateway.app import Gateway, build_app, build_gateway
from gateway.settings import Settings, load_settings

# The pool clients use (both instances), and one pool per instance to pin a backend.
POOL = "gemma"
PLAIN_POOL = "gemma-plain"
SPEC_POOL = "gemma-spec"
PLAIN, SPEC = "plain", "speculative"

# One profile and no preferences: the policy router's capability filters (modality, context estimate)
# apply, and load alone orders the two backends.
MINIMAL_POLICY = "version: 1\nrouting: static\nprofiles:\n  - name: default\n"

START_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 30.0
# Probe fast so a test sees a loading engine become routable within a few tens of milliseconds.
FAST_PROBE = {"interval_s": 0.5, "starting_interval_s": 0.02, "timeout_s": 2.0}


def pair_settings(plain_url: str, spec_url: str, policy: Path) -> Settings:
    backends = [
        {"name": PLAIN, "url": plain_url, "flavor": "llamacpp"},
        {"name": SPEC, "url": spec_url, "flavor": "llamacpp"},
    ]
    pools = [
        {"model": POOL, "backends": [PLAIN, SPEC]},
        {"model": PLAIN_POOL, "backends": [PLAIN]},
        {"model": SPEC_POOL, "backends": [SPEC]},
    ]
    return load_settings(None, backends=backends, pools=pools, policy=policy, probe=FAST_PROBE)


def write_policy(directory: Path) -> Path:
    path = directory / "policy.yaml"
    path.write_text(MINIMAL_POLICY)
    return path


@dataclass(frozen=True)
class RunningGateway:
    url: str
    port: int
    gateway: Gateway

    @property
    def v1(self) -> str:
        return self.url + "/v1"


def _bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def serving(settings: Settings) -> Iterator[RunningGateway]:
    """Build the gateway from `settings`, serve it until the block ends, always shut it down."""
    gateway = build_gateway(settings)
    config = uvicorn.Config(build_app(gateway), lifespan="on", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    sock = _bound_socket()
    port = int(sock.getsockname()[1])
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="gateway", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            time.sleep(0.01)
        yield RunningGateway(f"http://127.0.0.1:{port}", port, gateway)
    finally:
        server.should_exit = True
        thread.join(timeout=START_TIMEOUT_S)
        sock.close()


def get_json(port: int, path: str) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def backend_states(port: int) -> dict[str, Mapping[str, Any]]:
    """/gateway/backends as {backend name: its state}."""
    return {b["name"]: b for b in get_json(port, "/gateway/backends")["backends"]}


def wait_until_ready(running: RunningGateway, names: tuple[str, ...] = (PLAIN, SPEC)) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        states = backend_states(running.port)
        if all(states[name]["status"] == "ready" for name in names):
            return
        time.sleep(0.02)
    raise RuntimeError(f"backends not ready through the gateway: {backend_states(running.port)}")


def metric_samples(port: int, path: str = "/metrics") -> dict[str, float]:
    """A Prometheus text exposition as {sample with labels: value}."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def histogram_delta(
    before: Mapping[str, float], after: Mapping[str, float], family: str, labels: str
) -> tuple[float, float]:
    """(sum, count) a gateway histogram moved by between two scrapes, for one label set."""
    key_sum, key_count = f"{family}_sum{{{labels}}}", f"{family}_count{{{labels}}}"
    return (
        after.get(key_sum, 0.0) - before.get(key_sum, 0.0),
        after.get(key_count, 0.0) - before.get(key_count, 0.0),
    )
