"""Take the README's screenshots of the status page: `python tests/ui/screenshots.py [OUT_DIR]` (docs/).

The fleet of ui_harness.py in Debian's chromium: the whole page while clients stream (the fleet under
load), the fleet while cold-fp8 warms up, and the fleet at phone width once flaky-fp8's breaker is open
and gone-fp8 is dead.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

# The repository first, so the `gateway` package wins over the tests/gateway folder of the same name.
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE), str(HERE.parent)]

from ui_harness import browser_page, load, open_breaker, status_stack, wait_gone  # noqa: E402

POLL_S = 2.0


async def take(out: Path) -> None:
    async with status_stack() as stack, browser_page(width=1280, height=900) as page:
        await page.goto(stack.url + "/ui")
        await page.wait_for_selector("#backends .card")
        async with load(stack, concurrency=8):
            await asyncio.sleep(12 * POLL_S)
            await page.screenshot(path=str(out / "ui-fleet-under-load.png"), full_page=True)
            await page.locator("#fleet").screenshot(path=str(out / "ui-backend-warming.png"))
        await open_breaker(stack)
        await wait_gone(stack)
        await page.set_viewport_size({"width": 390, "height": 844})
        await asyncio.sleep(1.5 * POLL_S)
        await page.locator("#fleet").screenshot(path=str(out / "ui-breaker-open-phone.png"))


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "docs"
    asyncio.run(take(target))
    print(f"screenshots written to {target}")
