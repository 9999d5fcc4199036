"""Serve an ASGI app in the current event loop on a free 127.0.0.1 port, for tests that need a real socket
(the official openai client, subprocess clients, Prometheus). The one place test harnesses start uvicorn."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn


@asynccontextmanager
async def serve_asgi(
    app: Any, stop_timeout_s: float = 15.0, **options: Any
) -> AsyncIterator[tuple[str, uvicorn.Server]]:
    """Yield (base URL, server) once uvicorn accepts connections; always shut it down afterwards.
    `options` go to uvicorn.Config (gateway/serving.py `server_options`: what `serve` runs with)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", **options))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()  # startup failed: raise its error here
                await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", server
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, stop_timeout_s)
        sock.close()
