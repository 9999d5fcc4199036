"""Twin engines as processes of their own (`spark-gateway sim`, one engine each, on a fixed loopback port),
so a benchmark can hit them with real signals: SIGKILL then a restart on the same port (the engine warms
up again, as a real one would), SIGSTOP then SIGCONT (a hung process that holds its connections open).
Every process is killed when the context ends."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml


@dataclass
class EngineProcess:
    name: str
    port: int
    fleet_file: Path
    time_scale: float
    warmup_s: float  # simulated
    log: Path
    process: subprocess.Popen[bytes] | None = None
    stopped: bool = False  # SIGSTOPped and not resumed yet
    killed: bool = False  # SIGKILLed and not restarted yet
    pids: list[int] = field(default_factory=list)
    ready_at: float = 0.0  # monotonic time its warm-up should be over (plus a second to start)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def healthy(self) -> bool:
        up = not self.stopped and not self.killed and self.process is not None
        return up and time.monotonic() >= self.ready_at

    def start(self) -> None:
        command = [
            sys.executable,
            "-m",
            "gateway",
            "sim",
            "--fleet",
            str(self.fleet_file),
            "--time-scale",
            str(self.time_scale),
        ]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
        self.pids.append(self.process.pid)
        self.killed = False
        self.ready_at = time.monotonic() + self.warmup_s / self.time_scale + 1.0

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()  # SIGKILL: no goodbye, connections reset
        self.process.wait(10)
        self.killed = True

    def stop(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self.stopped = False

    def end(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
        self.process.wait(10)


def _fleet_file(folder: Path, name: str, port: int, model: str, seed: int, warmup_s: float) -> Path:
    engine = {
        "name": name,
        "flavor": "vllm",
        "port": port,
        "served_model_name": model,
        "device": name,
        "seed": seed,
        "warmup_s": warmup_s,
    }
    path = folder / f"fleet-{name}.yaml"
    path.write_text(yaml.safe_dump({"name": f"twin-{name}", "devices": {name: {}}, "engines": [engine]}))
    return path


@asynccontextmanager
async def engine_processes(
    names: list[str], ports: list[int], model: str, time_scale: float, warmup_s: float
) -> AsyncIterator[dict[str, EngineProcess]]:
    """Start one process per engine and wait until each answers /health; always end them all."""
    with tempfile.TemporaryDirectory(prefix="engines-") as tmp:
        folder = Path(tmp)
        engines = {
            name: EngineProcess(
                name,
                port,
                _fleet_file(folder, name, port, model, i, warmup_s),
                time_scale,
                warmup_s,
                folder / f"{name}.log",
            )
            for i, (name, port) in enumerate(zip(names, ports, strict=True))
        }
        try:
            for engine in engines.values():
                engine.start()
            await asyncio.gather(*(wait_healthy(engine, 60.0) for engine in engines.values()))
            yield engines
        finally:
            for engine in engines.values():
                engine.end()


async def wait_healthy(engine: EngineProcess, timeout: float) -> None:
    """Until the engine answers /health with 200 (ready, its warm-up over)."""
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session,
        asyncio.timeout(timeout),
    ):
        while True:
            if engine.process is not None and engine.process.poll() is not None:
                raise RuntimeError(f"engine {engine.name} exited (code {engine.process.returncode})")
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(engine.url + "/health") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.1)
