"""The status page's engine buttons against a real Docker Engine API (podman's, tests/engines' rig): the
page lists a managed engine with its memory against the device budget, its Stop button drains and stops
the container, and Start brings it back; keyboard only."""

from __future__ import annotations

import asyncio
from typing import Any

from engine_rig import Podman, engine, gateway_settings
from loopback import serve_asgi
from ui_harness import browser_page

from gateway.app import build_app, build_gateway

BOUND_S = 60.0


def _running(podman: Podman, name: str) -> bool:
    containers = podman.client().containers.list(filters={"name": name})
    return any(c.status == "running" for c in containers)


async def _until(check: Any, what: str, timeout_s: float = 20.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not await asyncio.to_thread(check):
            await asyncio.sleep(0.1)


async def test_the_stop_button_stops_a_managed_engine_and_start_brings_it_back(podman: Podman) -> None:
    name, model = f"ui{podman.token}", f"m-ui-{podman.token}"
    settings = gateway_settings(podman, [engine(podman, name, model)], devices={"spark": {"memory_gib": 20}})
    gateway = build_gateway(settings)
    manager = gateway.engines
    assert manager is not None
    async with asyncio.timeout(BOUND_S), serve_asgi(build_app(gateway)) as (url, _), browser_page() as page:
        assert await manager.request_start(name, batch=False)
        await _until(lambda: _running(podman, name), "the container runs")
        await page.goto(url + "/ui")
        row = page.locator(f'#engine-rows tr[data-engine="{name}"]')
        await row.wait_for()
        resident = manager.resident_gib("spark")  # other engines of this podman may be found by labels
        assert f"{resident:.1f} GiB of 20.0 GiB" in await page.locator("#devices").inner_text()
        stop = row.get_by_role("button", name=f"Stop {name}")
        await stop.focus()
        await page.keyboard.press("Enter")
        await _until(lambda: str(manager.engines[name].phase) == "stopped", "the engine stopped")
        await _until(lambda: not _running(podman, name), "the container stopped")
        start = row.get_by_role("button", name=f"Start {name}")
        await start.wait_for(timeout=10_000)
        assert f"{resident - 6:.1f} GiB of 20.0 GiB" in await page.locator("#devices").inner_text()
        await start.focus()
        await page.keyboard.press("Enter")
        await _until(lambda: _running(podman, name), "the container runs again")
        await page.wait_for_selector(f"#notice:has-text('{name}: start done')", timeout=20_000)
