"""The real gateway over a shipped twin fleet, both in this process on ephemeral ports of 127.0.0.1.

`gateway_over_fleet("spark-duo-35b")` starts the fleet (warm-up skipped), the gateway built from the
fleet exactly as `spark-gateway serve --fleet` builds it (its policy file, or another one), waits until
the gateway is ready, and hands back a `Stack` with an official openai client pointed at the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
from loopback import serve_asgi
from openai.types.chat import ChatCompletionContentPartParam, ChatCompletionMessageParam

from gateway.app import Gateway, build_app, build_gateway
from gateway.backends.registry import Status
from gateway.bench.routing import routed_copy
from gateway.commands.serve import settings_for_fleet
from gateway.sim.fleet import FleetSpec, load_fleet
from gateway.sim.runner import TwinFleet
from gateway.sim.text import make_prompt

REPO = Path(__file__).resolve().parents[2]
# Simulated seconds per real second: a 512-token answer at ~60 tok/s takes ~0.2 s of real time.
TIME_SCALE = 50.0
# Tokens the gateway's estimate adds per chat message (role markers): kept out of the prompt text so a
# request "of N tokens" is estimated near N.
_MESSAGE_OVERHEAD = 4


@dataclass
class Stack:
    fleet: TwinFleet
    gateway: Gateway
    url: str
    client: openai.AsyncOpenAI
    http: httpx.AsyncClient
    model: str

    def upstream_requests(self) -> dict[str, int]:
        """Generation requests each twin engine has received."""
        return {name: self.fleet.engine(name).observed.requests_total for name in self.fleet.names}

    def inflight(self) -> int:
        return sum(state.inflight for state in self.gateway.registry.backends.values())

    async def wait_inflight(self, count: int, timeout_s: float = 5.0) -> None:
        async with asyncio.timeout(timeout_s):
            while self.inflight() < count:
                await asyncio.sleep(0.01)


def fleet_spec(name: str) -> FleetSpec:
    """A shipped fleet with its engines already loaded (the 5-minute simulated warm-up skipped)."""
    spec = load_fleet(REPO / "deploy" / "fleets" / f"{name}.yaml")
    engines = [engine.model_copy(update={"warmup_s": 0.0}) for engine in spec.engines]
    return spec.model_copy(update={"engines": engines})


@contextlib.asynccontextmanager
async def gateway_over_fleet(
    fleet: str | FleetSpec,
    *,
    time_scale: float = TIME_SCALE,
    policy: Path | None = None,
    state_dir: Path | None = None,
    routing: str | None = None,
) -> AsyncIterator[Stack]:
    """`fleet`: a shipped fleet's name, or a spec built by the test. `state_dir` (live-measurement
    snapshots): give a fresh one for a gateway that must start with no samples. `routing`: the policy
    with every profile routed so ("static": its prefer order alone), instead of as the file says."""
    spec = fleet_spec(fleet) if isinstance(fleet, str) else fleet
    async with (
        TwinFleet(spec, time_scale=time_scale, ephemeral_ports=True) as twins,
        _routed(policy, spec, routing) as policy,
    ):
        await twins.wait_ready(timeout_s=10)
        settings = settings_for_fleet(spec, {n: twins.url(n) for n in twins.names})
        overrides: dict[str, Any] = {"policy": policy, "state_dir": state_dir}
        settings = settings.model_copy(update={k: v for k, v in overrides.items() if v is not None})
        gateway = build_gateway(settings)
        async with _serving(gateway) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
            await _wait_ready(http, gateway)
            client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30)
            try:
                yield Stack(twins, gateway, url, client, http, spec.engines[0].served_model_name)
            finally:
                await client.close()


@contextlib.asynccontextmanager
async def _routed(policy: Path | None, spec: FleetSpec, routing: str | None) -> AsyncIterator[Path | None]:
    """`policy` (else the fleet's own) with every profile routed by `routing`; as it is when None."""
    source = policy or (REPO / spec.policy if spec.policy else None)
    if routing is None or source is None:
        yield policy
        return
    with tempfile.TemporaryDirectory() as folder:
        yield routed_copy(source, Path(folder), routing)


@contextlib.asynccontextmanager
async def _serving(gateway: Gateway) -> AsyncIterator[str]:
    async with serve_asgi(build_app(gateway)) as (url, _):
        yield url


async def _wait_ready(http: httpx.AsyncClient, gateway: Gateway) -> None:
    """Every backend probed ready (the gateway's /ready needs only one per pool): routing is then
    decided by the policy alone."""
    async with asyncio.timeout(10):
        while (await http.get("/ready")).status_code != 200 or any(
            state.status is not Status.READY for state in gateway.registry.backends.values()
        ):
            await asyncio.sleep(0.02)


def text_messages(prompt_tokens: int, seed: int = 0) -> list[ChatCompletionMessageParam]:
    """One user message of about `prompt_tokens` tokens (the twin's tokenizer, gateway/sim/text.py)."""
    text = make_prompt(max(1, prompt_tokens - _MESSAGE_OVERHEAD), seed=seed)
    return [{"role": "user", "content": text}]


def image_messages() -> list[ChatCompletionMessageParam]:
    parts: list[ChatCompletionContentPartParam] = [
        {"type": "text", "text": "What is on this screenshot?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]
    return [{"role": "user", "content": parts}]


@dataclass(frozen=True)
class Routed:
    backend: str
    profile: str
    completion_tokens: int | None  # None when the stream was closed early


async def send(
    stack: Stack,
    messages: list[ChatCompletionMessageParam],
    max_tokens: int,
    *,
    complete: bool = True,
) -> Routed:
    """One streamed chat request through the gateway. With `complete=False` the stream is closed after
    its first chunk: enough to see where it went when it would queue behind held requests."""
    raw = await stack.client.chat.completions.with_raw_response.create(
        model=stack.model,
        messages=messages,
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    headers = raw.headers
    stream = raw.parse()
    tokens: int | None = None
    try:
        async for chunk in stream:
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
            if not complete:
                break
    finally:
        await stream.close()
    return Routed(headers["x-gateway-backend"], headers["x-gateway-profile"], tokens)


@contextlib.asynccontextmanager
async def held(stack: Stack, count: int, prompt_tokens: int, max_tokens: int) -> AsyncIterator[None]:
    """`count` long requests kept in flight (sent one after the other, each counted by the gateway before
    the next goes), cancelled on exit: the client disconnects and the gateway cancels them upstream."""
    tasks: list[asyncio.Task[Any]] = []
    base = stack.inflight()
    try:
        for i in range(count):
            request = stack.client.chat.completions.create(
                model=stack.model,
                messages=text_messages(prompt_tokens, seed=1000 + i),
                max_tokens=max_tokens,
                extra_body={"ignore_eos": True},  # never ends on its own within the test
            )
            tasks.append(asyncio.create_task(request))
            await stack.wait_inflight(base + i + 1)
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        async with asyncio.timeout(5):
            while stack.inflight() > base:
                await asyncio.sleep(0.01)
