"""Background loops: one long-running asyncio task per loop, started once and stopped by cancelling it.

The prober (one loop per backend), the scraper, the policy watcher and the snapshot saver each repeat one
step (a probe, a scrape round, a poll, a save) on a `BackgroundTask`, which owns the loop and keeps it
alive: an exception a step raises never ends it. The failure is logged once per change (`FailureLog`:
when its text differs from the previous failure's, with the traceback that first time; again once when a
step succeeds after it), the owner's `on_error` says what a failed step means for its state (a probe that
could not be made is a backend that did not answer) and when to try again, and the loop goes on.

Stopping cancels the task and waits until it has ended, so nothing of it still runs (or logs) once stop()
has returned; a cancellation an HTTP client turned into its own timeout error does not keep it running.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Awaitable, Callable

from gateway.redact import redact

# One round of a loop's work; returns the seconds to wait before the next round.
Step = Callable[[], Awaitable[float]]
# What a failed round means for the owner's state; returns the seconds to wait before the next round.
OnError = Callable[[Exception], float]


def describe(error: BaseException | str) -> str:
    """One line naming a failure: `Type: message` for an exception, credentials in URLs removed."""
    if isinstance(error, str):
        return redact(error)
    text = str(error)
    return redact(f"{type(error).__name__}: {text}" if text else type(error).__name__)


class FailureLog:
    """Says that `what` fails once per distinct failure, and once that it works again.

    A loop that fails every second with the same error logs it once, not every second: a failure is
    logged when its text differs from the previous one's, an exception with its traceback (credentials
    in URLs removed); the first success after a failure logs the recovery."""

    def __init__(self, logger: logging.Logger, what: str, *, level: int = logging.ERROR) -> None:
        self._log = logger
        self.what = what
        self._level = level
        self.error: str | None = None  # the current failure, None while it works

    def failed(self, error: BaseException | str) -> bool:
        """Note a failure; True when it was logged (it differs from the one before)."""
        text = describe(error)
        if text == self.error:
            return False
        self.error = text
        if isinstance(error, BaseException):
            trace = redact("".join(traceback.format_exception(error)).rstrip())
            self._log.log(self._level, "%s failed: %s\n%s", self.what, text, trace)
        else:
            self._log.log(self._level, "%s failed: %s", self.what, text)
        return True

    def ok(self) -> bool:
        """Note a success; True when it ends a failure (the recovery was logged)."""
        if self.error is None:
            return False
        level = min(self._level, logging.WARNING)  # as visible as the failure was, short of an error
        self._log.log(level, "%s works again (it failed: %s)", self.what, self.error)
        self.error = None
        return True


class BackgroundTask:
    """Runs `step()` over and over as one named task: `delay_s` before the first round, then the pause
    each round returns (after a failed round: the pause `on_error` returns). start() twice keeps the
    first task."""

    def __init__(
        self,
        step: Step,
        name: str,
        *,
        on_error: OnError,
        logger: logging.Logger,
        delay_s: float = 0.0,
        retry_s: float = 1.0,  # the pause after a round whose `on_error` failed too
    ) -> None:
        self._step = step
        self._name = name
        self._on_error = on_error
        self._delay_s = delay_s
        self._retry_s = retry_s
        self.failures = FailureLog(logger, f"background task {name}")
        self._hook_failures = FailureLog(logger, f"error handling of background task {name}")
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Must be called from inside the event loop the task is to run on."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        """Cancel the task and wait until it has ended; a no-op when it is not running."""
        task, self._task = self._task, None
        if task is None:
            return
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.1)
        error = None if task.cancelled() else task.exception()  # retrieved, so never "never retrieved"
        if error is not None:
            self.failures.failed(error)

    async def _run(self) -> None:
        pause = self._delay_s
        while True:
            if pause > 0:
                await asyncio.sleep(pause)
            try:
                pause = await self._step()
            except Exception as exc:  # CancelledError is no Exception: stop() still ends the loop
                self._stop_if_cancelled()
                self.failures.failed(exc)
                pause = self._after(exc)
            else:
                self.failures.ok()

    def _after(self, exc: Exception) -> float:
        try:
            pause = self._on_error(exc)
        except Exception as also:
            self._hook_failures.failed(also)
            return self._retry_s
        self._hook_failures.ok()
        return pause

    @staticmethod
    def _stop_if_cancelled() -> None:
        # A cancellation that a library turned into an exception of its own must still stop the loop.
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError
