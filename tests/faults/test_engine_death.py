"""An engine killed with SIGKILL under 50 streams, the two twin engines running as processes of their own
(`spark-gateway sim`), the gateway in front of them.

A stream is committed to a backend only once it produced content: the streams that had none yet when
their engine died (queued in it, having sent only the 200 and vLLM's empty role frame) complete on the
other engine as one clean stream; the streams that already had content are continued there from the
text they had (proxy/resume.py), spliced into the same stream, every token asked for delivered. Every
wait is bounded, and the engine processes are always killed."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson
import yaml
from fault_rig import MODEL, gateway_settings
from loopback import serve_asgi

from gateway.app import build_app, build_gateway
from gateway.backends.registry import Status
from gateway.records import RequestRecord

STREAMS = 50  # the must-show: kill -9 one engine of two with 50 streams in flight
# Engine "a" runs at most this many sequences: the rest of its streams wait in its queue, role frame sent.
A_SEQS = 4
TIME_SCALE = 2.0  # simulated seconds per real second: a 300-token stream lasts a couple of seconds
MAX_TOKENS = 300
BOUND_S = 60.0  # the whole test, whatever happens


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _fleet_file(folder: Path, name: str, port: int, seed: int, max_num_seqs: int) -> Path:
    engine = {
        "name": name,
        "flavor": "vllm",
        "port": port,
        "served_model_name": MODEL,
        "device": name,
        "seed": seed,
        "perf": {"max_num_seqs": max_num_seqs},
    }
    path = folder / f"fleet-{name}.yaml"
    path.write_text(yaml.safe_dump({"name": f"twin-{name}", "devices": {name: {}}, "engines": [engine]}))
    return path


@asynccontextmanager
async def engine_process(folder: Path, name: str, seed: int, max_num_seqs: int) -> AsyncIterator[EngineProc]:
    """One twin engine as a `spark-gateway sim` process, yielded once it answers /health."""
    port = _free_port()
    fleet = _fleet_file(folder, name, port, seed, max_num_seqs)
    command = [sys.executable, "-m", "gateway", "sim", "--fleet", str(fleet), "--time-scale", str(TIME_SCALE)]
    with open(folder / f"engine-{name}.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
        proc = EngineProc(name, f"http://127.0.0.1:{port}", process)
        try:
            await proc.wait_healthy(20.0)
            yield proc
        finally:
            if process.poll() is None:
                process.kill()
            await asyncio.to_thread(process.wait, 10)


@dataclass
class EngineProc:
    name: str
    url: str
    process: subprocess.Popen[bytes]

    async def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            while True:
                assert self.process.poll() is None, f"engine {self.name} exited early"
                try:
                    async with session.get(self.url + "/health") as response:
                        if response.status == 200:
                            return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                assert time.monotonic() < deadline, f"engine {self.name} never became healthy"
                await asyncio.sleep(0.1)


@dataclass
class Seen:
    """What one client saw, as it arrived."""

    backend: str | None = None  # x-gateway-backend, once the response head arrived
    status: int | None = None
    raw: bytes = b""

    @property
    def content(self) -> bool:
        return any(_has_content(e) for e in _events(self.raw) if not e.startswith(b'{"error"'))


def _events(raw: bytes) -> list[bytes]:
    """The data of each complete frame (a frame still arriving is left out)."""
    return [f[len(b"data: ") :] for f in raw.split(b"\n\n")[:-1] if f.startswith(b"data: ")]


def _has_content(event: bytes) -> bool:
    if event == b"[DONE]":
        return False
    choices = orjson.loads(event).get("choices") or []
    return any(
        (c.get("delta") or {}).get("content") or (c.get("delta") or {}).get("reasoning") for c in choices
    )


async def _stream(session: aiohttp.ClientSession, url: str, seen: Seen) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "tell me a long story"}],
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,  # every stream generates MAX_TOKENS: a continuation must add up to them
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with session.post(url + "/v1/chat/completions", json=body) as response:
        seen.status, seen.backend = response.status, response.headers.get("x-gateway-backend")
        async for chunk in response.content.iter_any():
            seen.raw += chunk


async def _engine_queue(session: aiohttp.ClientSession, engine: EngineProc) -> tuple[float, float]:
    """(running, waiting) requests, from the engine's own /metrics."""
    async with session.get(engine.url + "/metrics") as response:
        text = await response.text()
    found = {}
    for line in text.splitlines():
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
            if line.startswith(name + "{") or line.startswith(name + " "):
                found[name] = float(line.rsplit(" ", 1)[1])
    return found.get("vllm:num_requests_running", 0.0), found.get("vllm:num_requests_waiting", 0.0)


async def test_every_stream_survives_its_engine_being_killed(tmp_path: Path) -> None:
    records: list[RequestRecord] = []
    async with (
        asyncio.timeout(BOUND_S),
        engine_process(tmp_path, "a", 0, A_SEQS) as a,
        engine_process(tmp_path, "b", 1, 64) as b,
    ):
        timeouts = {"connect_s": 1.0, "first_byte_s": 20.0, "idle_s": 5.0}
        settings = gateway_settings({"a": a.url, "b": b.url}, timeouts=timeouts)
        gateway = build_gateway(settings, observers=[records.append])
        async with (
            serve_asgi(build_app(gateway)) as (url, _),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=BOUND_S)) as session,
        ):
            while any(state.status is not Status.READY for state in gateway.registry.backends.values()):
                await asyncio.sleep(0.05)
            seen = [Seen() for _ in range(STREAMS)]
            tasks = [asyncio.create_task(_stream(session, url, s)) for s in seen]
            # Wait until engine "a" runs its A_SEQS sequences and at least two more streams wait in its
            # queue (the engine has sent them the 200 and the role frame, and nothing more), then let the
            # running ones' content reach their clients.
            while True:
                assert not any(t.done() for t in tasks), "a stream ended before engine a was loaded"
                running, waiting = await _engine_queue(session, a)
                if running == A_SEQS and waiting >= 2:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)
            without_content = [s for s in seen if not s.content]
            a.process.kill()  # SIGKILL: no goodbye, the kernel drops its connections
            await asyncio.gather(*tasks)

    assert len(records) == STREAMS
    continued = [s for s in seen if s.backend == "a" and s not in without_content]
    print(
        f"\n{STREAMS} streams, a killed: {len(without_content)} without content then, all completed on b; "
        f"{len(continued)} with content from a, continued on b"
    )
    # The streams queued in "a" were tried there first, then served by "b".
    failed_over = [
        r for r in records if [backend for backend, _ in r.failures] == ["a"] and not r.resumed_from
    ]
    assert len(failed_over) >= waiting
    assert all((r.status, r.backend, r.error) == (200, "b", None) for r in failed_over), failed_over
    assert len(without_content) >= waiting and all(one.backend == "b" for one in without_content)
    # Those with content from "a" when it died were continued on "b": as many records say so.
    assert len(continued) >= A_SEQS
    assert sum(1 for r in records if r.resumed_from == ["a"] and r.error is None) == len(continued)
    for one in seen:  # every stream is one clean stream with every token it asked for
        events = _events(one.raw)
        assert one.status == 200 and events[-1] == b"[DONE]", one.raw[-300:]
        assert not any(e.startswith(b'{"error"') for e in events), one.raw[-300:]
        assert sum(b'"role"' in e for e in events) == 1  # one role frame, never a dead engine's too
        assert len({orjson.loads(e)["id"] for e in events[:-1]}) == 1  # one stream's id throughout
        assert orjson.loads(events[-2])["usage"]["completion_tokens"] == MAX_TOKENS
