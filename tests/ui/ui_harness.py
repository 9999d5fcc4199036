"""The status page's test rig: a gateway over a twin fleet whose backends are in every state, and Debian's
chromium driven headless by Playwright.

The fleet (all in this process, on ephemeral ports of 127.0.0.1): seed 000's pair on one Spark
(`q475-dflash` speculative, `fp8-vision`), both ready; `cold-fp8` in their pool, still loading its weights
(warming, with the flavor's expected warm-up); `flaky-fp8` alone in pool `flaky`, failing every request
(its breaker opens once clients send it a few); `gone-fp8` alone in pool `gone`, which stops listening a
few seconds in after having served (dead); `hung-fp8` alone in pool `hung`, which stops answering a few
seconds in, a stream in flight (stalled). No browser is downloaded: without /usr/bin/chromium (Debian's
`chromium` package) or the playwright package, the tests skip and say which is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from loopback import serve_asgi
from openai.types.chat import ChatCompletionContentPartParam

from gateway.api.auth import hash_key
from gateway.app import Gateway, build_app, build_gateway
from gateway.settings import load_settings
from gateway.sim.fleet import FaultSpec, FleetSpec, load_fleet
from gateway.sim.runner import TwinFleet

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIME_SCALE = 50.0  # simulated seconds per real second
MODEL = "Qwen3.6-35B-A3B"
GONE_AFTER_S = 4.0  # real seconds after the fleet starts that gone-fp8 stops listening
HANG_AFTER_S = 6.0  # and that hung-fp8 stops answering
ADMIN_KEY = "sk-admin-test-0123456789"
CLIENT_KEY = "sk-client-test-0123456789"
BACKEND_SECRET = "s3cret-in-url"  # a credential in a backend URL: must never reach the page


def browser_missing() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (pip install -e '.[test]')"
    if shutil.which(CHROMIUM) is None:
        return f"{CHROMIUM} is missing (apt-get install chromium): the status page tests need a real browser"
    return None


def status_fleet() -> FleetSpec:
    base = load_fleet(REPO / "deploy" / "fleets" / "spark-home-35b.yaml")
    ready = [engine.model_copy(update={"warmup_s": 0.0}) for engine in base.engines]
    vision = ready[1]
    extra = [
        vision.model_copy(update={"name": "cold-fp8", "warmup_s": 1e7}),
        vision.model_copy(
            update={"name": "flaky-fp8", "served_model_name": "flaky", "faults": _faults(error_rate=1.0)}
        ),
        vision.model_copy(
            update={
                "name": "gone-fp8",
                "served_model_name": "gone",
                "faults": _faults(crash_at_s=GONE_AFTER_S * TIME_SCALE),
            }
        ),
        vision.model_copy(
            update={
                "name": "hung-fp8",
                "served_model_name": "hung",
                "faults": _faults(hang_at_s=HANG_AFTER_S * TIME_SCALE),
            }
        ),
    ]
    return base.model_copy(update={"engines": [*ready, *extra]})


def _faults(**values: Any) -> FaultSpec:
    return FaultSpec(**values)


@dataclass
class StatusStack:
    fleet: TwinFleet
    gateway: Gateway
    url: str
    http: httpx.AsyncClient  # with the admin key when keys are configured
    client: openai.AsyncOpenAI

    def status(self, name: str) -> str:
        return str(self.gateway.registry.backends[name].status)


@contextlib.asynccontextmanager
async def status_stack(keys: bool = False, routing: str = "static") -> AsyncIterator[StatusStack]:
    """`routing`: the policy's routing, static (the prefer order alone) or adaptive as shipped (decisions
    carry predictions)."""
    spec = status_fleet()
    with tempfile.TemporaryDirectory() as folder:
        policy = routed_policy(Path(folder), routing)
        async with _stack(spec, policy, keys) as stack:
            yield stack


def routed_policy(folder: Path, routing: str) -> Path:
    """The fleet's shipped policy with its profiles' routing set to `routing`."""
    text = (REPO / "policies" / "spark-home.yaml").read_text()
    assert "\nrouting: adaptive\n" in text
    path = folder / f"spark-home-{routing}.yaml"
    path.write_text(text.replace("\nrouting: adaptive\n", f"\nrouting: {routing}\n"))
    return path


@contextlib.asynccontextmanager
async def _stack(spec: FleetSpec, policy: Path, keys: bool) -> AsyncIterator[StatusStack]:
    async with TwinFleet(spec, time_scale=TIME_SCALE, ephemeral_ports=True) as twins:
        urls = {name: _with_secret(twins.url(name)) for name in twins.names}
        settings = _settings(spec, urls, policy, keys)
        gateway = build_gateway(settings)
        headers = {"authorization": f"Bearer {ADMIN_KEY}"} if keys else {}
        async with (
            serve_asgi(build_app(gateway)) as (url, _),
            httpx.AsyncClient(base_url=url, timeout=15, headers=headers) as http,
        ):
            key = CLIENT_KEY if keys else "unused"
            client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=30)
            stack = StatusStack(twins, gateway, url, http, client)
            try:
                ready = ("q475-dflash", "fp8-vision", "gone-fp8", "hung-fp8")
                await _wait_for(stack, dict.fromkeys(ready, "ready"))
                yield stack
            finally:
                await client.close()


def _with_secret(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://ops:{BACKEND_SECRET}@{rest}"


def _settings(spec: FleetSpec, urls: dict[str, str], policy: Path, keys: bool) -> Any:
    backends = [
        {
            "name": e.name,
            "url": urls[e.name],
            "flavor": e.flavor,
            "device": e.device,
            "modalities": ["text", "image"] if e.vision else ["text"],
        }
        for e in spec.engines
    ]
    served = list(dict.fromkeys(e.served_model_name for e in spec.engines))
    pools = [
        {"model": m, "backends": [e.name for e in spec.engines if e.served_model_name == m]} for m in served
    ]
    auth = {"admin_key_hash": hash_key(ADMIN_KEY), "client_key_hashes": [hash_key(CLIENT_KEY)]}
    return load_settings(
        None,
        backends=backends,
        pools=pools,
        policy=policy,
        # An opened breaker stays open for the whole test; probes poll warming backends every second.
        breaker={"cooldown_s": 120.0, "max_cooldown_s": 120.0, "failure_threshold": 3},
        probe={"interval_s": 0.5, "starting_interval_s": 0.5, "timeout_s": 1.0},
        auth=auth if keys else {},
    ).model_copy(update={"state_dir": None})


async def _wait_for(stack: StatusStack, wanted: dict[str, str], timeout_s: float = 20.0) -> None:
    async with asyncio.timeout(timeout_s):
        while any(stack.status(name) != status for name, status in wanted.items()):
            await asyncio.sleep(0.05)


async def open_breaker(stack: StatusStack) -> None:
    """Clients send pool `flaky` requests until flaky-fp8's breaker opens (every one fails)."""
    async with asyncio.timeout(20):
        while not stack.gateway.registry.breaker_open("flaky-fp8"):
            with contextlib.suppress(openai.APIError):
                await stack.client.chat.completions.create(
                    model="flaky", messages=[{"role": "user", "content": "hi"}], max_tokens=4
                )


@contextlib.asynccontextmanager
async def stalled(stack: StatusStack) -> AsyncIterator[None]:
    """A long stream on hung-fp8 in flight when it stops answering, until the gateway calls it stalled."""
    request = stack.client.chat.completions.create(
        model="hung",
        messages=[{"role": "user", "content": "Tell me a long story."}],
        max_tokens=100_000,
        stream=True,
        extra_body={"ignore_eos": True},
    )

    async def read() -> None:
        async for _ in await request:
            pass

    task = asyncio.create_task(read())
    try:
        async with asyncio.timeout(HANG_AFTER_S + 20):
            while stack.gateway.registry.backends["hung-fp8"].stalled_since is None:
                await asyncio.sleep(0.05)
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def wait_gone(stack: StatusStack) -> None:
    await _wait_for(stack, {"gone-fp8": "dead"}, timeout_s=GONE_AFTER_S + 15)


async def chat(stack: StatusStack, seed: int, max_tokens: int = 48, image: bool = False) -> tuple[str, str]:
    """One streamed chat request through the gateway (with an image: the policy's vision profile):
    the (x-request-id, x-gateway-backend) it was answered with."""
    text: ChatCompletionContentPartParam = {"type": "text", "text": f"Say something about {seed}, at length."}
    content: list[ChatCompletionContentPartParam] = [text]
    if image:
        content.append({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}})
    raw = await stack.client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": content}], max_tokens=max_tokens, stream=True
    )
    stream = raw.parse()
    async for _ in stream:
        pass
    return raw.headers["x-request-id"], raw.headers["x-gateway-backend"]


@contextlib.asynccontextmanager
async def load(stack: StatusStack, concurrency: int = 6) -> AsyncIterator[list[tuple[str, str]]]:
    """Clients streaming back to back while the block runs; yields the (request id, backend) pairs seen."""
    seen: list[tuple[str, str]] = []
    stop = asyncio.Event()

    async def client(offset: int) -> None:
        i = offset
        while not stop.is_set():
            seen.append(await chat(stack, i, image=offset % 3 == 0))  # a third of the clients send images
            i += concurrency

    tasks = [asyncio.create_task(client(n)) for n in range(concurrency)]
    try:
        yield seen
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def browser_page(width: int = 1280, height: int = 900) -> AsyncIterator[Any]:
    missing = browser_missing()
    if missing is not None:
        pytest.skip(missing)
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = await browser.new_page(viewport={"width": width, "height": height})
            yield page
        finally:
            await browser.close()
