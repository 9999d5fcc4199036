"""The gateway as a `spark-gateway serve` subprocess for a benchmark: its own process, so its resident
memory is measured cleanly and its event loop is not the benchmark's. Loopback only; the process is
always ended (SIGTERM, then SIGKILL) when the context ends."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

STATE_DIR_ENV = "SPARK_GATEWAY_STATE_DIR"  # would override the config's `state_dir: null`
SERVE = ("-m", "gateway")  # how the subprocess is started, before `serve --config ...`


@dataclass(frozen=True, slots=True)
class GatewayProcess:
    url: str
    process: subprocess.Popen[bytes]
    folder: Path  # a temporary folder of its own (its config), gone when the context ends

    @property
    def pid(self) -> int:
        return self.process.pid


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


@asynccontextmanager
async def gateway_process(
    config: dict[str, Any],
    launcher: Sequence[str] = SERVE,
    env: dict[str, str] | None = None,
    log_level: str = "error",
    log: Path | None = None,
    ready_timeout_s: float = 30.0,
) -> AsyncIterator[GatewayProcess]:
    """Start the gateway with `config` (its `host`/`port` are set here) and yield it once `/ready` answers
    200. `launcher` replaces `-m gateway` (e.g. a traced start-up); `env` is added to the environment,
    from which the state-directory override is removed: a bench keeps no state. `log`: its output goes to
    that file instead of this process's. `ready_timeout_s`: how long it may take to start."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        folder = Path(tmp)
        path = folder / "gateway.yaml"
        path.write_text(yaml.safe_dump({**config, "host": "127.0.0.1", "port": port}))
        command = [sys.executable, *launcher, "serve", "--config", str(path), "--log-level", log_level]
        environment = {k: v for k, v in os.environ.items() if k != STATE_DIR_ENV}
        environment.update({"PYTHONUNBUFFERED": "1", **(env or {})})
        process = _start(command, environment, log)
        gateway = GatewayProcess(f"http://127.0.0.1:{port}", process, folder)
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
                await wait_ready(session, gateway.url, process, ready_timeout_s)
            yield gateway
        finally:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def _start(command: list[str], env: dict[str, str], log: Path | None) -> subprocess.Popen[bytes]:
    if log is None:
        return subprocess.Popen(command, env=env)
    with open(log, "ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)


async def wait_ready(
    session: aiohttp.ClientSession, url: str, process: subprocess.Popen[bytes], timeout: float = 30.0
) -> None:
    """Until the gateway subprocess at `url` answers /ready with 200; fails at once if it exits first."""
    async with asyncio.timeout(timeout):
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the gateway exited (code {process.returncode}) before it was ready")
            try:
                async with session.get(url + "/ready") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
