"""The hostile mix: 100 malformed requests of 20 kinds (gateway/bench/malformed.py) interleaved with 1,000
legitimate ones at 40 per second, through a real gateway (uvicorn, with the protocol and limits
`spark-gateway serve` runs with) in front of two twin engines.

Correctness only: no breaker opens, the gateway answers no 5xx, every malformed request gets a 4xx with
an OpenAI-style JSON error body, and every legitimate one is served. How much the malformed ones cost
the legitimate ones (p99, side by side with a clean run) is `spark-gateway bench hostile mix`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

import aiohttp
from fault_rig import MODEL, TIME_SCALE, fleet_spec, gateway_settings
from loopback import serve_asgi

from gateway.app import build_app, build_gateway
from gateway.bench.malformed import KINDS, RawAnswer, malformed, send_raw
from gateway.serving import server_options
from gateway.sim.runner import TwinFleet

LEGIT = 1000
BAD = 100
RATE = 40.0  # legitimate requests per second
BOUND_S = 110.0


async def _legit(session: aiohttp.ClientSession, url: str, i: int) -> tuple[int, bool]:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"question {i}"}],
        "max_tokens": 8,
        "stream": i % 2 == 0,
    }
    async with session.post(url + "/v1/chat/completions", json=body) as response:
        raw = await response.read()
    complete = raw.rstrip().endswith(b"data: [DONE]") if body["stream"] else b'"choices"' in raw
    return response.status, complete and b'"error"' not in raw


async def test_malformed_requests_among_legitimate_ones_open_no_breaker_and_get_json_4xx() -> None:
    rng = random.Random(7)
    bad = malformed(MODEL, BAD, rng)
    assert len({kind for kind, _ in bad}) == len(KINDS) == 20
    every = LEGIT // BAD  # one malformed request after every tenth legitimate one
    async with asyncio.timeout(BOUND_S):
        async with TwinFleet(fleet_spec("a", "b"), time_scale=TIME_SCALE, ephemeral_ports=True) as fleet:
            await fleet.wait_ready(10)
            urls = {name: fleet.url(name) for name in fleet.names}
            # Generous upstream timeouts: a busy CI host must not turn slowness into breaker failures.
            settings = gateway_settings(urls, timeouts={"first_byte_s": 15.0, "idle_s": 15.0})
            gateway = build_gateway(settings)
            async with (
                serve_asgi(build_app(gateway), **server_options(settings.limits)) as (url, _),
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
            ):
                while not all(gateway.registry.backends[n].status == "ready" for n in urls):
                    await asyncio.sleep(0.02)
                host, port = url.removeprefix("http://").split(":")
                legit_tasks: list[asyncio.Task[tuple[int, bool]]] = []
                bad_tasks: list[tuple[str, asyncio.Task[RawAnswer]]] = []
                started = time.monotonic()
                for i in range(LEGIT):
                    await asyncio.sleep(max(0.0, started + i / RATE - time.monotonic()))
                    legit_tasks.append(asyncio.create_task(_legit(session, url, i)))
                    if i % every == every - 1:
                        kind, raw = bad[i // every]
                        bad_tasks.append((kind, asyncio.create_task(send_raw(host, int(port), raw))))
                legit = await asyncio.gather(*legit_tasks)
                answers = [(kind, await task) for kind, task in bad_tasks]
                breakers = gateway.reliability.breakers.snapshot() if gateway.reliability else {}

    assert len(answers) == BAD
    wrong = [
        (kind, a.status, a.body[:120]) for kind, a in answers if not (400 <= a.status < 500 and a.json_error)
    ]
    assert wrong == []
    assert Counter(status for status, _ in legit) == {200: LEGIT}
    assert all(complete for _, complete in legit)
    assert set(breakers) == {"a", "b"}
    assert [state.times_opened for state in breakers.values()] == [0, 0]
    assert [state.window_failures for state in breakers.values()] == [0, 0]  # none even counted
    assert all(state.state == "closed" for state in breakers.values())
