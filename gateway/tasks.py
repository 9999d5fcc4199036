"""One long-running asyncio task that a component starts once and stops by cancelling it.

The scraper, the policy watcher and the snapshot saver each own a loop like this; stopping awaits the
cancelled task so that nothing of it still runs (or logs) once stop() has returned.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

Loop = Callable[[], Coroutine[Any, Any, None]]


class BackgroundTask:
    """Runs `loop()` as one named task on the running event loop; start() twice keeps the first one."""

    def __init__(self, loop: Loop, name: str) -> None:
        self._loop = loop
        self._name = name
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Must be called from inside the event loop the task is to run on."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name=self._name)

    async def stop(self) -> None:
        """Cancel the task and wait until it has ended; a no-op when it is not running."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
