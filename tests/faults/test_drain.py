"""Graceful shutdown end to end: SIGTERM to a `spark-gateway serve` subprocess while a stream is in
flight. The stream runs to its end, a new request is turned away (503 shutting_down, or refused once the
listener is closed), and the process exits within the drain deadline. Streams still running at the drain
deadline each end with an error event and `[DONE]`, one log line each and no traceback."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import orjson
import yaml
from fault_rig import MODEL, fleet_spec

from gateway.bench.gateway_proc import wait_ready
from gateway.sim.runner import TwinFleet

DRAIN_S = 10.0
# Slow enough that a 1,000-token stream lasts well over a second of real time.
TIME_SCALE = 10.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(url: str, port: int) -> dict[str, object]:
    return {
        "host": "127.0.0.1",
        "port": port,
        "backends": [{"name": "a", "url": url, "flavor": "vllm"}],
        "pools": [{"model": MODEL, "backends": ["a"]}],
        "probe": {"interval_s": 0.2, "starting_interval_s": 0.1},
        "shutdown": {"drain_timeout_s": DRAIN_S},
    }


async def _new_request(url: str) -> int | str:
    """A fresh connection's answer: the status, or "refused" when nothing listens any more."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as fresh,
            fresh.post(url + "/v1/chat/completions", json=body) as response,
        ):
            if response.status == 503:
                error = (await response.json())["error"]
                assert error["code"] == "shutting_down" and response.headers["retry-after"]
            return response.status
    except aiohttp.ClientConnectionError:
        return "refused"


async def test_sigterm_lets_the_stream_finish_turns_new_requests_away_and_exits(tmp_path: Path) -> None:
    async with TwinFleet(fleet_spec("a"), time_scale=TIME_SCALE, ephemeral_ports=True) as fleet:
        await fleet.wait_ready(10)
        port = _free_port()
        config = tmp_path / "gateway.yaml"
        config.write_text(yaml.safe_dump(_config(fleet.url("a"), port)))
        command = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
        process = subprocess.Popen(command, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        url = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
                await wait_ready(session, url, process)
                body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
                async with session.post(
                    url + "/v1/chat/completions", json={**body, "max_tokens": 1000}
                ) as stream:
                    first = await stream.content.readany()
                    process.send_signal(signal.SIGTERM)
                    signalled = time.monotonic()
                    await asyncio.sleep(0.2)  # the signal handler has run
                    turned_away = await _new_request(url)
                    rest = await stream.content.read()
                    stream_ended = time.monotonic() - signalled
            exit_code = await asyncio.to_thread(process.wait, DRAIN_S + 5)
            exited = time.monotonic() - signalled
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(5)
    assert stream.status == 200 and first.startswith(b"data: ")
    whole = first + rest
    assert whole.rstrip().endswith(b"data: [DONE]") and b'"error"' not in whole  # it completed
    assert stream_ended > 0.5  # it really was in flight well after the signal
    assert turned_away in (503, "refused")
    # uvicorn re-raises the signal it captured once it has shut down, so a clean exit reports SIGTERM.
    assert exit_code in (0, -signal.SIGTERM)
    assert exited < DRAIN_S  # drained as soon as the stream ended, never waited out the deadline


CUT_DRAIN_S = 1.0
CUT_STREAMS = 8


async def _long_stream(session: aiohttp.ClientSession, url: str, started: list[bytes]) -> tuple[int, bytes]:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": 4000,
    }
    async with session.post(url + "/v1/chat/completions", json=body) as response:
        first = await response.content.readany()
        started.append(first)
        return response.status, first + await response.content.read()


async def test_streams_past_the_drain_deadline_end_with_an_error_event_and_done(tmp_path: Path) -> None:
    async with TwinFleet(fleet_spec("a"), time_scale=TIME_SCALE, ephemeral_ports=True) as fleet:
        await fleet.wait_ready(10)
        port = _free_port()
        config = tmp_path / "gateway.yaml"
        settings = {**_config(fleet.url("a"), port), "shutdown": {"drain_timeout_s": CUT_DRAIN_S}}
        config.write_text(yaml.safe_dump(settings))
        command = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
        log_path = tmp_path / "gateway.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
        url = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
                await wait_ready(session, url, process)
                started: list[bytes] = []
                streams = [
                    asyncio.create_task(_long_stream(session, url, started)) for _ in range(CUT_STREAMS)
                ]
                async with asyncio.timeout(15):
                    while len(started) < CUT_STREAMS:
                        await asyncio.sleep(0.02)
                process.send_signal(signal.SIGTERM)
                signalled = time.monotonic()
                async with asyncio.timeout(15):  # the deadline, the grace to end, and then some
                    answers = await asyncio.gather(*streams)
                ended_after = time.monotonic() - signalled
            exit_code = await asyncio.to_thread(process.wait, 15)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(5)
    for status, raw in answers:
        events = [f for f in raw.split(b"\n\n") if f.startswith(b"data: ")]
        assert status == 200 and events[-1] == b"data: [DONE]", raw[-300:]
        error = orjson.loads(events[-2][len(b"data: ") :])["error"]
        assert error["code"] == "shutting_down" and "drain deadline" in error["message"]
        assert not any(b'"error"' in e for e in events[:-2])  # it was running fine until the cut
    assert CUT_DRAIN_S <= ended_after < CUT_DRAIN_S + 5  # cut at the deadline, not at the stream's end
    assert exit_code in (0, -signal.SIGTERM)
    logged = log_path.read_text()
    assert "Traceback" not in logged, logged[-3000:]
    assert logged.count("ended by the gateway") == CUT_STREAMS  # one line per stream
    assert f"{CUT_STREAMS} ended with an error event" in logged
