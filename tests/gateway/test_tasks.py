"""The one background-loop helper (gateway/tasks.py): a loop outlives every exception its step raises,
logs each distinct failure once (and its recovery once), never logs a URL's credentials, and stop()
ends it even when a library turned the cancellation into an error of its own."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from gateway.tasks import BackgroundTask, FailureLog

log = logging.getLogger("tests.tasks")


class Script:
    """A step that raises the scripted errors in turn (None: a good round), then succeeds for good."""

    def __init__(self, errors: list[Exception | None]) -> None:
        self.errors = list(errors)
        self.rounds = 0
        self.handled: list[str] = []

    async def step(self) -> float:
        self.rounds += 1
        if self.errors:
            error = self.errors.pop(0)
            if error is not None:
                raise error
        return 0.001

    def on_error(self, exc: Exception) -> float:
        self.handled.append(str(exc))
        return 0.001


async def wait_for(condition: Callable[[], object], timeout: float = 3.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


def messages(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


async def test_a_failing_step_never_ends_the_loop_and_each_distinct_error_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tests.tasks")
    a, b = RuntimeError("engine said no"), KeyError("surprise")
    script = Script([a, a, a, b, b, a, None, a])
    task = BackgroundTask(script.step, "t", on_error=script.on_error, logger=log)
    task.start()
    try:
        await wait_for(lambda: script.rounds >= 12)  # it went on well past every failure
        assert task.running
    finally:
        await task.stop()
    assert not task.running
    assert len(script.handled) == 7  # the owner heard of every failed round
    # Logged when the text changes, not per round: a, b, a again, then a after the good round.
    failed = messages(caplog, "background task t failed:")
    assert [m.splitlines()[0] for m in failed] == [
        "background task t failed: RuntimeError: engine said no",
        "background task t failed: KeyError: 'surprise'",
        "background task t failed: RuntimeError: engine said no",
        "background task t failed: RuntimeError: engine said no",
    ]
    assert "Traceback" in failed[0]  # the first of each has its traceback
    assert len(messages(caplog, "background task t works again")) == 2  # after the good round, and at the end


async def test_a_failing_error_handler_does_not_end_the_loop_either() -> None:
    script = Script([ValueError("x")] * 3)

    def broken(exc: Exception) -> float:
        raise LookupError("handler bug")

    task = BackgroundTask(script.step, "t", on_error=broken, logger=log, retry_s=0.001)
    task.start()
    try:
        await wait_for(lambda: script.rounds >= 6)
    finally:
        await task.stop()


async def test_credentials_in_a_failure_never_reach_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    script = Script([ValueError("cannot fetch http://gw:pw-SECRET@10.0.0.5:8000/health")])
    task = BackgroundTask(script.step, "t", on_error=script.on_error, logger=log)
    task.start()
    try:
        await wait_for(lambda: script.rounds >= 2)
    finally:
        await task.stop()
    assert "http://10.0.0.5:8000/health" in caplog.text  # the host stays: operators need it
    assert "pw-SECRET" not in caplog.text and "gw:" not in caplog.text


async def test_stop_ends_a_loop_whose_step_turns_the_cancellation_into_a_timeout() -> None:
    entered = asyncio.Event()

    async def step() -> float:
        entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise TimeoutError("the HTTP client's own timeout") from None  # as some clients do
        return 0.0

    task = BackgroundTask(step, "t", on_error=lambda exc: 0.0, logger=log)
    task.start()
    await entered.wait()
    async with asyncio.timeout(2):
        await task.stop()
    assert not task.running


async def test_a_delay_comes_before_the_first_round() -> None:
    script = Script([])
    task = BackgroundTask(script.step, "t", on_error=script.on_error, logger=log, delay_s=0.3)
    task.start()
    await asyncio.sleep(0.1)
    rounds = script.rounds
    await task.stop()
    assert rounds == 0


def test_failure_log_logs_changes_and_the_recovery_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tests.tasks")
    failures = FailureLog(log, "scrape of a", level=logging.INFO)
    assert failures.failed("HTTP 503") and not failures.failed("HTTP 503")
    assert failures.error == "HTTP 503"
    assert failures.failed("timed out")
    assert failures.ok() and not failures.ok()
    assert failures.error is None
    assert [r.getMessage() for r in caplog.records] == [
        "scrape of a failed: HTTP 503",
        "scrape of a failed: timed out",
        "scrape of a works again (it failed: timed out)",
    ]
