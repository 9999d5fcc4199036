"""Graceful shutdown: on SIGTERM stop taking new requests, let the ones in flight (long streams included)
finish up to a deadline, then end what is left cleanly and close.

DrainTracker counts requests in flight and knows whether the gateway is draining. At the deadline it tells
the requests still in flight to end (`end_inflight`, the dispatcher's `end_all`): each one answers for
itself, a stream under way with an error frame and `[DONE]`, and finishes its record, so none is cut
mid-frame by the server's close; they get END_GRACE_S to do so. DrainGuard is the pure-ASGI middleware
that counts every HTTP request and, once draining, answers new ones with 503 and a Retry-After (so a load
balancer or client goes elsewhere) while /health keeps saying the process lives. `drain_then` is what
the signal handler runs. Nothing here touches signals, so it is tested directly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from gateway.api.asgi import ASGIApp, Receive, Scope, Send
from gateway.api.errors import send_error
from gateway.clock import monotonic

# After the deadline, how long the requests told to end get to send their last frame before the server
# closes: one write each, so a fraction of a second on any host; a client that does not read its socket
# is cut by the server's close after this.
END_GRACE_S = 2.0

EndInflight = Callable[[str], int]  # ends every request in flight for the reason given; how many


@dataclass(frozen=True, slots=True)
class DrainResult:
    drained: bool  # every request in flight finished before the deadline
    remaining: int  # requests still in flight at the deadline (told to end, or cut off by the close)
    waited_seconds: float
    ended: int = 0  # requests told to end at the deadline (an error frame and [DONE] on a stream)


class DrainTracker:
    """Requests in flight and the draining flag. One per app, made by the composition root, which hands
    it `end_inflight` (the dispatcher's `end_all`) to end what is left at the deadline."""

    def __init__(self, end_inflight: EndInflight | None = None) -> None:
        self.end_inflight = end_inflight
        self._inflight = 0
        self._draining = False
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def inflight(self) -> int:
        return self._inflight

    def enter(self) -> bool:
        """Count one new request, or refuse it (False) because the gateway is draining."""
        if self._draining:
            return False
        self._inflight += 1
        self._idle.clear()
        return True

    def leave(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._idle.set()

    def begin_drain(self) -> None:
        self._draining = True

    async def drain(self, timeout: float) -> DrainResult:
        """Stop taking requests and wait up to `timeout` seconds for those in flight to finish; then tell
        the rest to end and give them END_GRACE_S to write their last frame."""
        self.begin_drain()
        started = monotonic()
        with contextlib.suppress(TimeoutError):  # a deadline reached is reported, not raised
            await asyncio.wait_for(self._idle.wait(), timeout)
        remaining, ended = self._inflight, 0
        if remaining and self.end_inflight is not None:
            ended = self.end_inflight(
                f"the gateway is shutting down and its drain deadline ({timeout:g}s) has passed"
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), END_GRACE_S)
        return DrainResult(remaining == 0, remaining, monotonic() - started, ended)


async def drain_then(tracker: DrainTracker, timeout: float, close: Callable[[], None]) -> DrainResult:
    """Drain, then call `close` (e.g. tell the server to exit) whether or not everything finished."""
    result = await tracker.drain(timeout)
    close()
    return result


class DrainGuard:
    """Pure-ASGI middleware: counts HTTP requests in the tracker; refuses new ones with 503 while draining.
    Paths in `exempt` (liveness, metrics) are served and not counted, so they never hold up the drain."""

    def __init__(
        self,
        app: ASGIApp,
        tracker: DrainTracker,
        retry_after_seconds: int = 5,
        exempt: frozenset[str] = frozenset({"/health", "/metrics"}),
    ) -> None:
        self.app = app
        self.tracker = tracker
        self._retry_after = str(retry_after_seconds).encode()
        self._exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._exempt:
            await self.app(scope, receive, send)
            return
        if not self.tracker.enter():
            headers = [(b"retry-after", self._retry_after), (b"connection", b"close")]
            message = "The gateway is shutting down; retry shortly."
            await send_error(send, 503, message, "shutting_down", headers=headers)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.tracker.leave()
