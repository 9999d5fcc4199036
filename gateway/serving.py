"""uvicorn with a graceful drain: the first SIGTERM (or SIGINT) stops taking requests (503 shutting_down
with Retry-After from DrainGuard), lets requests in flight, long streams included, finish up to the drain
deadline, then tells uvicorn to exit. A second signal exits at once."""

from __future__ import annotations

import asyncio
import logging
import socket
from types import FrameType
from typing import Any

import uvicorn

from gateway.api.connections import ConnectionCap, default_cap, raise_fd_limit
from gateway.api.http_protocol import HeadLimits, http_protocol
from gateway.settings import Limits
from gateway.shutdown import DrainResult, DrainTracker, drain_then

log = logging.getLogger("gateway.serve")

KEEP_ALIVE_S = 75  # nginx's default

# Once the drain is over, what is left is cut off: uvicorn need not wait again.
_AFTER_DRAIN_S = 1


def connection_cap(limits: Limits) -> ConnectionCap:
    """The soft limit on open files raised to the hard one, and the cap on client connections under it
    (api/connections.py): `max_client_connections`, or what the descriptors leave."""
    fd_limit = raise_fd_limit()
    cap = limits.max_client_connections or default_cap(fd_limit, limits.connections)
    log.info("client connections capped at %d (open files: %d)", cap, fd_limit)
    return ConnectionCap(cap)


def server_options(limits: Limits, cap: ConnectionCap | None = None) -> dict[str, Any]:
    """uvicorn options every gateway server runs with (`spark-gateway serve`, and tests through a socket):
    the httptools protocol with the head limits, JSON protocol errors (api/http_protocol.py) and the
    connection cap."""
    head = HeadLimits(limits.max_head_bytes, limits.max_header_line_bytes, limits.read_timeout_s)
    return {
        "http": http_protocol(head, cap),
        "access_log": False,  # one log line per request costs more than the whole proxy path
        # Idle keep-alive connections close after this long. Longer than the clients' own idle expiry
        # (httpx 5 s, aiohttp 15 s), so the client closes first: with uvicorn's 5 s a client could reuse
        # a connection the server was closing, and its POST died with "connection reset by peer".
        "timeout_keep_alive": KEEP_ALIVE_S,
    }


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, tracker: DrainTracker, drain_timeout_s: float) -> None:
        if config.timeout_graceful_shutdown is None:
            config.timeout_graceful_shutdown = _AFTER_DRAIN_S
        super().__init__(config)
        self.tracker = tracker
        self.drain_timeout_s = drain_timeout_s
        self.drain_result: DrainResult | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.tracker.draining or self._loop is None:
            super().handle_exit(sig, frame)  # a second signal: exit now
            return
        self.tracker.begin_drain()  # from here on new requests get 503
        # Signal handlers run between bytecodes of the loop's thread: hand the work to the loop.
        self._loop.call_soon_threadsafe(self._start_drain, sig)

    def _start_drain(self, sig: int) -> None:
        log.info("draining: %d request(s) in flight, up to %gs", self.tracker.inflight, self.drain_timeout_s)
        self._drain_task = asyncio.create_task(self._drain(sig))

    async def _drain(self, sig: int) -> None:
        def close() -> None:
            uvicorn.Server.handle_exit(self, sig, None)

        self.drain_result = await drain_then(self.tracker, self.drain_timeout_s, close)
        result = self.drain_result
        left = f"{result.remaining} left at the deadline, {result.ended} ended with an error event"
        log.info("drained in %.1fs: %s", result.waited_seconds, "all done" if result.drained else left)
