"""A flood of idle connections against a real `spark-gateway serve` process whose open-files limit is
pinned low (soft = hard = 256, so it cannot be raised): a new client's request is still served, and the
gateway says what it did, in its log and its metrics (api/connections.py)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
from fault_rig import MODEL, fleet_spec

from gateway.bench.gateway_proc import gateway_process
from gateway.sim.runner import TwinFleet

# `python -c` with the limit pinned, then the gateway's own entry point with the same arguments.
PINNED = (
    "-c",
    "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)); "
    "sys.argv = ['gateway', *sys.argv[1:]]; runpy.run_module('gateway', run_name='__main__')",
)


async def test_a_flood_of_idle_connections_never_silently_resets_a_new_client(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    async with TwinFleet(fleet_spec("a"), time_scale=50.0, ephemeral_ports=True) as fleet:
        await fleet.wait_ready(10)
        config = {
            "backends": [{"name": "a", "url": fleet.url("a"), "flavor": "vllm"}],
            "pools": [{"model": MODEL, "backends": ["a"]}],
            "state_dir": None,
        }
        async with gateway_process(config, launcher=PINNED, log_level="info", log=log) as gateway:
            host, port = gateway.url.removeprefix("http://").split(":")
            idle = [socket.create_connection((host, int(port))) for _ in range(300)]  # past 256 fds
            try:
                await asyncio.sleep(0.5)
                body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
                timeout = aiohttp.ClientTimeout(total=10)
                async with aiohttp.ClientSession(timeout=timeout) as session:
                    async with session.post(gateway.url + "/v1/chat/completions", json=body) as answer:
                        status = answer.status
                    async with session.get(gateway.url + "/metrics") as scraped:
                        metrics = await scraped.text()
            finally:
                for sock in idle:
                    sock.close()
    assert status == 200
    text = log.read_text()
    assert "client connections capped at" in text and "client connections at the cap" in text
    evicted = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("gateway_client_connections_evicted_total")
    )
    assert evicted >= 300 - 256
