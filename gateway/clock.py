"""The gateway's clock: the machine's monotonic clock, or its event loop's where that loop keeps time.

Every duration the gateway measures (TTFT, ITL, e2e, queue waits, a breaker's cool-down) is read here.
On a real loop that is `time.monotonic()`: asyncio's default loop reads the same clock, and uvloop's
`loop.time()` has millisecond resolution, too coarse for the inter-token gap of a fast engine. A loop
that keeps simulated time (bench/virtual_time.py: the clock stands still while code runs and jumps to
the next timer when nothing is ready) says so with a true `simulated_time` attribute, and then its
clock is the one read, so the gateway measures simulated seconds, as the twin on that loop keeps them,
instead of how long the machine took to run the code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def monotonic() -> float:
    """Seconds on a monotonic clock: the running loop's if it keeps simulated time, else the machine's."""
    return reader()()


def reader() -> Callable[[], float]:
    """`monotonic()`'s clock itself, chosen once: for a reader on the hot path (the stream meter reads it
    per chunk), which then skips the loop lookup each call costs (several hundred ns against ~100)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return time.monotonic
    return loop.time if getattr(loop, "simulated_time", False) else time.monotonic


def epoch() -> float:
    """Unix seconds that advance with `monotonic()`: `time.time()` on a real loop; on a simulated one,
    shifted by how far its clock stands from the machine's, so ages kept in epoch seconds (the live
    windows' timestamps) pass at the loop's pace."""
    return time.time() + (monotonic() - time.monotonic())
