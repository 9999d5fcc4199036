"""An asyncio event loop on simulated time, so the product's own async code (its sleeps, timeouts and
background loops) replays hours in seconds.

`loop.time()` is a virtual clock that stands still while callbacks run and jumps to the next timer when
nothing is ready: `asyncio.sleep(600)` costs no wall time. Work handed to a worker thread
(`asyncio.to_thread`, as the engine manager does for every Docker API call) is waited for in real time
with the clock stopped, so a thread's answer lands at the simulated moment it was asked for. A function
that blocks in its thread for the whole run (an event stream) is `park`ed: it is not waited for.
"""

from __future__ import annotations

import asyncio
import functools
import selectors
from collections.abc import Callable
from concurrent.futures import Future as ThreadFuture
from typing import Any


class _Selector(selectors.DefaultSelector):
    """Polls the real file descriptors without waiting; the wait itself is a jump of the virtual clock."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self.loop
        assert loop is not None
        if timeout == 0:
            return super().select(0)  # callbacks are ready to run
        if loop.threads_busy:
            return super().select(None)  # a worker thread's answer wakes the loop; the clock stands still
        events = super().select(0)
        if events:
            return events
        if timeout is None:
            return super().select(None)  # no timer at all: only the outside world can wake the loop
        loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self, start: float = 0.0) -> None:
        selector = _Selector()
        super().__init__(selector)
        selector.loop = self
        self.simulated_time = True  # gateway/clock.py reads this loop's clock instead of the machine's
        self._now = start
        self.threads_busy = 0
        self._parked: set[Callable[..., Any]] = set()

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += max(0.0, seconds)

    def park(self, function: Callable[..., Any]) -> None:
        """`function` blocks in its worker thread until the run ends: never wait for it."""
        self._parked.add(function)

    def run_in_executor(  # type: ignore[override]  # the same call, typed loosely
        self, executor: Any, func: Callable[..., Any], *args: Any
    ) -> asyncio.Future[Any]:
        future = super().run_in_executor(executor, func, *args)
        if _target(func, args) not in self._parked:
            self.threads_busy += 1
            future.add_done_callback(self._thread_done)  # runs on the loop, once the answer is in
        return future

    def _thread_done(self, future: asyncio.Future[Any] | ThreadFuture[Any]) -> None:
        self.threads_busy -= 1


def _target(func: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """The function a worker thread runs: `asyncio.to_thread` wraps it as partial(context.run, f, ...)."""
    if isinstance(func, functools.partial) and func.args:
        return func.args[0]
    return func


def run(main: Callable[[], Any], start: float = 0.0) -> Any:
    """Run the coroutine function `main` on a fresh virtual-time loop."""
    loop = VirtualTimeLoop(start)
    try:
        return loop.run_until_complete(main())
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
