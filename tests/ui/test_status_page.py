"""The status page (/ui) in Debian's chromium, headless, driven by Playwright, against a gateway over a twin
fleet (ui_harness.py): every backend's status as the gateway has it (ready, warming, stalled, breaker
open, dead), a warming backend's ETA counting down, charts that move while clients stream, a decision
feed that agrees with the x-gateway-backend headers the clients saw, no data without the admin key when
keys are configured, no credential of a backend URL anywhere, and a page usable at phone width with the
keyboard alone."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

from ui_harness import (
    ADMIN_KEY,
    BACKEND_SECRET,
    CLIENT_KEY,
    browser_page,
    load,
    open_breaker,
    stalled,
    status_stack,
    wait_gone,
)

POLL_S = 2.0  # gateway/api/ui.py POLL_INTERVAL_S
EXPECTED = {
    "q475-dflash": ("ready", "ready"),
    "fp8-vision": ("ready", "ready"),
    "cold-fp8": ("warming", "warming up"),
    "flaky-fp8": ("breaker", "breaker open"),
    "gone-fp8": ("dead", "dead"),
    "hung-fp8": ("stalled", "stalled"),
}


async def _cards(page: Any) -> dict[str, tuple[str, str]]:
    script = """() => Object.fromEntries([...document.querySelectorAll('#backends .card')].map(c =>
        [c.dataset.backend, [c.dataset.status, c.querySelector('.badge').textContent]]))"""
    return {name: tuple(v) for name, v in (await page.evaluate(script)).items()}


async def _eta(page: Any) -> tuple[int, str]:
    eta = page.locator('.card[data-backend="cold-fp8"] .eta')
    return int(await eta.get_attribute("data-seconds") or "-1"), await eta.inner_text()


async def test_every_backend_shows_its_status_and_the_warming_eta_counts_down() -> None:
    async with status_stack() as stack, browser_page() as page, stalled(stack):
        await open_breaker(stack)
        await wait_gone(stack)
        await page.goto(stack.url + "/ui")
        await page.wait_for_selector('.card[data-backend="gone-fp8"][data-status="dead"]', timeout=10_000)
        await page.wait_for_selector('.card[data-backend="hung-fp8"][data-status="stalled"]', timeout=10_000)
        # Each state in words on its badge, not only in the card's colour.
        assert await _cards(page) == EXPECTED
        # The countdown agrees with the gateway's own ETA and moves with the clock between polls.
        backends = (await stack.http.get("/gateway/backends")).json()["backends"]
        api_eta = next(b["eta_s"] for b in backends if b["name"] == "cold-fp8")
        first, text = await _eta(page)
        started = time.monotonic()
        assert text.startswith("ready in ~") and "min" in text, text
        assert abs(first - api_eta) <= 4, (first, api_eta)
        await asyncio.sleep(3.2)
        second, _ = await _eta(page)
        elapsed = time.monotonic() - started
        assert first - second >= 2 and abs((first - second) - elapsed) <= 2, (first, second, elapsed)
        await _usable_at_phone_width(page)


async def _usable_at_phone_width(page: Any) -> None:
    """At 390 px nothing overflows sideways (wide tables scroll inside their own region), and Tab alone
    reaches the scrollable regions."""
    await page.set_viewport_size({"width": 390, "height": 844})
    await page.wait_for_timeout(300)
    overflow = await page.evaluate("() => document.documentElement.scrollWidth")
    assert overflow <= 390, f"the page is {overflow} px wide at a 390 px viewport"
    reached: set[str] = set()
    for _ in range(40):
        await page.keyboard.press("Tab")
        label = await page.evaluate(
            "() => document.activeElement.getAttribute('aria-label') || document.activeElement.tagName"
        )
        reached.add(label)
    assert {"Recent routing decisions"} <= reached, reached


async def test_charts_move_and_the_feed_matches_what_clients_saw() -> None:
    async with status_stack() as stack, browser_page() as page:
        await page.goto(stack.url + "/ui")
        await page.wait_for_selector("#backends .card")
        async with load(stack) as seen:
            await asyncio.sleep(3 * POLL_S)
            before = await _charts(page)
            await asyncio.sleep(3 * POLL_S)
            after = await _charts(page)
        # More points on every chart, the traffic's two backends drawn with values, and values that moved.
        for chart in ("c-ttft", "c-itl", "c-tps"):
            assert after[chart]["points"] > before[chart]["points"], chart
            for backend in ("q475-dflash", "fp8-vision"):
                assert after[chart]["latest"].get(backend) is not None, (chart, backend, after[chart])
        assert any(after[c]["latest"] != before[c]["latest"] for c in ("c-ttft", "c-itl", "c-tps"))
        assert after["c-acc"]["latest"].get("q475-dflash") is not None  # the DFlash engine's acceptance
        shares = await page.locator("#share-backend .bar").evaluate_all(
            "rows => rows.map(r => r.dataset.name)"
        )
        assert {"q475-dflash", "fp8-vision"} <= set(shares)
        # Every decision the page lists went where the client was told it went.
        await page.wait_for_timeout(int(2.5 * POLL_S * 1000))
        rows = await page.locator("#decision-rows tr").evaluate_all(
            "rows => rows.map(r => [r.dataset.requestId, r.dataset.backend])"
        )
        told = dict(seen)
        matched = [(rid, backend) for rid, backend in rows if rid in told]
        assert len(matched) >= 20, (len(rows), len(matched))
        assert all(told[rid] == backend for rid, backend in matched), matched
        assert {backend for _, backend in matched} == {"q475-dflash", "fp8-vision"}


async def _charts(page: Any) -> dict[str, dict[str, Any]]:
    charts = {}
    for chart in ("c-ttft", "c-itl", "c-tps", "c-acc"):
        canvas = page.locator(f"#{chart}")
        charts[chart] = {
            "points": int(await canvas.get_attribute("data-points") or 0),
            "latest": json.loads(await canvas.get_attribute("data-latest") or "{}"),
        }
    return charts


async def test_with_keys_the_page_shows_nothing_without_the_admin_key_and_never_a_credential() -> None:
    async with status_stack(keys=True, routing="adaptive") as stack, browser_page() as page:
        async with load(stack):  # with the client key: measured cells, so decisions carry predictions
            await asyncio.sleep(3 * POLL_S)
        answers: list[Any] = []  # every answer the page got from /gateway/...
        page.on("response", lambda r: answers.append(r) if "/gateway/" in r.url else None)
        await page.goto(stack.url + "/ui")
        await page.wait_for_selector("#keyform:not([hidden])")
        await page.wait_for_timeout(int(1.5 * POLL_S * 1000))  # no polling goes on behind the form
        assert await page.locator("#content").is_hidden()
        text = await page.locator("body").inner_text()
        assert "q475-dflash" not in text and "spark-home" not in text
        assert answers and {r.status for r in answers} == {401}
        assert len(answers) <= 5  # one round, refused; no more until a key is given
        # A client key is not enough.
        answers.clear()
        await page.fill("#key", CLIENT_KEY)
        await page.press("#key", "Enter")
        await page.wait_for_selector("#notice:has-text('not the admin key')")
        await page.wait_for_timeout(500)  # the round's other answers
        assert answers and {r.status for r in answers} == {403}
        assert await page.locator("#content").is_hidden()
        # The admin key shows everything, and no credential of a backend URL is anywhere in it.
        await page.fill("#key", ADMIN_KEY)
        await page.press("#key", "Enter")
        await page.wait_for_selector('#backends .card[data-backend="q475-dflash"]')
        await page.wait_for_timeout(int(POLL_S * 1000))
        bodies = [(r.status, await r.text()) for r in answers]
        shown = await page.content() + "".join(body for _, body in bodies)
        assert BACKEND_SECRET not in shown and "ops:" not in shown
        assert any(status == 200 and "q475-dflash" in body for status, body in bodies)
        # Routed adaptively, the feed shows each request's measured TTFT and speed beside the prediction.
        cells = await page.locator("#decision-rows td.num").all_inner_texts()
        assert any(re.fullmatch(r"\d+ ms / \d+ ms", c) for c in cells), cells
        assert any(re.fullmatch(r"\d+ tok/s / \d+ tok/s", c) for c in cells), cells
        # Forgetting the key hides the data again.
        await page.click("#forget")
        assert await page.locator("#content").is_hidden()
        assert "q475-dflash" not in await page.locator("body").inner_text()
