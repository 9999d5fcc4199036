"""Hot reload: valid edits apply within the poll interval, invalid edits are refused and counted, and the
last good policy stays in force."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path

import pytest

from gateway.policy.crosscheck import KnownBackend
from gateway.policy.load import PolicyError, PolicyWatcher


def policy_text(threshold: int) -> str:
    return (
        "version: 1\n"
        "profiles:\n"
        "  - name: long\n"
        "    when:\n"
        f"      prompt_tokens: {{gt: {threshold}}}\n"
        "  - name: default\n"
    )


BROKEN = policy_text(1).replace("prompt_tokens", "prompt_tokenz")


def write(path: Path, text: str) -> None:
    # Atomic replace, as editors and config management tools do.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def threshold(watcher: PolicyWatcher) -> float | None:
    when = watcher.current.policy.profiles[0].when
    assert when is not None and when.prompt_tokens is not None
    return when.prompt_tokens.gt


def has_threshold(watcher: PolicyWatcher, value: int) -> bool:
    return threshold(watcher) == value


class Reloads:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def __call__(self, result: str, error: str | None) -> None:
        self.calls.append((result, error))


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text(1000))
    return path


@pytest.fixture
async def running(policy_file: Path) -> AsyncIterator[tuple[PolicyWatcher, Reloads]]:
    reloads = Reloads()
    watcher = PolicyWatcher(policy_file, interval_s=0.02, on_reload=reloads)
    await watcher.start()
    try:
        yield watcher, reloads
    finally:
        await watcher.stop()


async def wait_for(condition: Callable[[], object], timeout: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met within 2 s")
        await asyncio.sleep(0.01)


def test_a_broken_file_at_start_refuses_to_start(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(BROKEN)
    with pytest.raises(PolicyError):
        PolicyWatcher(path)


async def test_a_valid_edit_applies_within_two_seconds(
    running: tuple[PolicyWatcher, Reloads], policy_file: Path
) -> None:
    watcher, reloads = running
    write(policy_file, policy_text(2000))
    await wait_for(lambda: threshold(watcher) == 2000)
    assert reloads.calls == [("ok", None)]
    assert watcher.last_error is None


async def test_an_invalid_edit_is_refused_with_its_line_and_the_last_good_policy_stays(
    running: tuple[PolicyWatcher, Reloads], policy_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    watcher, reloads = running
    caplog.set_level(logging.ERROR, logger="gateway.policy")
    write(policy_file, BROKEN)
    await wait_for(lambda: reloads.calls)
    assert reloads.calls[0][0] == "error"
    assert threshold(watcher) == 1000
    assert (
        watcher.last_error is not None
        and f"{policy_file}:5: profiles.0.when.prompt_tokenz" in watcher.last_error
    )
    assert any(
        f"{policy_file}:5:" in r.getMessage() and "keeping the last good" in r.getMessage()
        for r in caplog.records
    )


async def test_the_same_broken_content_is_reported_once(
    running: tuple[PolicyWatcher, Reloads], policy_file: Path
) -> None:
    watcher, reloads = running
    write(policy_file, BROKEN)
    await wait_for(lambda: reloads.calls)
    write(policy_file, BROKEN)
    await asyncio.sleep(0.1)
    assert reloads.calls == [("error", watcher.last_error)]


async def test_twenty_rewrites_with_one_invalid_end_on_the_last_valid_policy(
    running: tuple[PolicyWatcher, Reloads], policy_file: Path
) -> None:
    watcher, reloads = running
    for i in range(20):
        if i == 9:
            write(policy_file, BROKEN)
            await wait_for(lambda: watcher.last_error is not None)
            assert threshold(watcher) == 1000 + i  # the policy from rewrite 8 is still in force
            continue
        write(policy_file, policy_text(1001 + i))
        await wait_for(partial(has_threshold, watcher, 1001 + i))
    assert threshold(watcher) == 1020
    assert watcher.reload_counts == {"ok": 19, "error": 1}
    assert [r for r, _ in reloads.calls].count("error") == 1
    assert watcher.last_error is None  # a later good edit clears it


def test_manual_reload_reports_errors_and_keeps_the_policy(policy_file: Path) -> None:
    watcher = PolicyWatcher(policy_file)
    policy_file.write_text(BROKEN)
    result = watcher.reload()
    assert not result.ok and result.errors and result.loaded is watcher.current
    assert threshold(watcher) == 1000
    policy_file.write_text(policy_text(5))
    result = watcher.reload()
    assert result.ok and result.changed and threshold(watcher) == 5


def test_a_touch_without_change_is_not_a_reload(policy_file: Path) -> None:
    reloads = Reloads()
    watcher = PolicyWatcher(policy_file, on_reload=reloads)
    policy_file.touch()
    assert watcher.poll() is None
    assert reloads.calls == []


def test_a_same_size_edit_is_noticed(policy_file: Path) -> None:
    watcher = PolicyWatcher(policy_file)
    stat = policy_file.stat()
    policy_file.write_text(policy_text(9999))  # same length as 1000
    os.utime(policy_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same mtime
    assert watcher.poll() is None  # seen; applied once the next poll finds it unchanged
    result = watcher.poll()
    assert result is not None and result.ok and threshold(watcher) == 9999


# A policy written in place, in two writes: the first half alone is a valid policy (it ends with a
# complete default profile), and must never be applied.
WHOLE = policy_text(3000) + "    prefer:\n      - fast\n      - slow\n"
HALF = WHOLE[: WHOLE.index("      - slow")]


def prefer(watcher: PolicyWatcher) -> list[str]:
    return list(watcher.current.policy.profiles[-1].prefer)


def test_a_file_written_in_place_is_applied_only_once_stable_never_half_written(policy_file: Path) -> None:
    reloads = Reloads()
    watcher = PolicyWatcher(policy_file, on_reload=reloads)
    with policy_file.open("r+b") as file:  # in place: same inode, truncated, then written in two parts
        file.truncate(0)
        file.write(HALF.encode())
        file.flush()
        assert watcher.poll() is None  # a valid prefix, but it may still be growing: not applied
        assert threshold(watcher) == 1000
        file.write(WHOLE[len(HALF) :].encode())
        file.flush()
    assert watcher.poll() is None  # changed since the last poll: wait once more
    result = watcher.poll()
    assert result is not None and result.ok
    assert threshold(watcher) == 3000 and prefer(watcher) == ["fast", "slow"]
    assert reloads.calls == [("ok", None)]  # one reload: the half-written file was never applied


async def test_a_file_written_in_place_within_one_interval_never_applies_its_prefix(
    policy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    applied: list[list[str]] = []
    watcher = PolicyWatcher(
        policy_file, interval_s=0.2, on_reload=lambda result, error: applied.append(prefer(watcher))
    )
    polled = asyncio.Event()
    poll = watcher.poll

    def observed() -> object:
        try:
            return poll()
        finally:
            polled.set()

    monkeypatch.setattr(watcher, "poll", observed)
    await watcher.start()
    try:
        await asyncio.wait_for(polled.wait(), 2)  # just after a poll: a whole interval until the next
        with policy_file.open("r+b") as file:
            file.truncate(0)
            file.write(HALF.encode())
            file.flush()
            polled.clear()
            await asyncio.wait_for(polled.wait(), 2)  # a poll saw the valid prefix...
            file.write(WHOLE[len(HALF) :].encode())  # ...and the rest comes before the next one
        await wait_for(lambda: threshold(watcher) == 3000)
    finally:
        await watcher.stop()
    assert applied == [["fast", "slow"]]


async def test_a_poll_that_raises_is_logged_once_and_polling_goes_on(
    policy_file: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher = PolicyWatcher(policy_file, interval_s=0.01)
    polls = 0

    def broken() -> None:
        nonlocal polls
        polls += 1
        raise RuntimeError("stat failed oddly")

    caplog.set_level(logging.INFO, logger="gateway.policy")
    monkeypatch.setattr(watcher, "_look", broken)
    await watcher.start()
    try:
        await wait_for(lambda: polls >= 5)  # the loop outlived every failed poll
        monkeypatch.undo()
        write(policy_file, policy_text(2000))
        await wait_for(lambda: threshold(watcher) == 2000)
    finally:
        await watcher.stop()
    failed = [r for r in caplog.records if r.levelno == logging.ERROR and "stat failed" in r.getMessage()]
    assert len(failed) == 1, "logged once, not once per poll"
    assert any("works again" in r.getMessage() for r in caplog.records)


async def test_stop_ends_the_polling_task(policy_file: Path) -> None:
    watcher = PolicyWatcher(policy_file, interval_s=0.01)
    await watcher.start()
    await watcher.stop()
    write(policy_file, policy_text(7))
    await asyncio.sleep(0.05)
    assert threshold(watcher) == 1000


KNOWN = (KnownBackend("spark-a", pools=("m",)), KnownBackend("spark-b", pools=("m",)))


def test_an_edit_naming_a_backend_the_config_lacks_is_refused_and_the_last_good_stays(
    policy_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reloads = Reloads()
    watcher = PolicyWatcher(policy_file, on_reload=reloads, known=KNOWN)
    caplog.set_level(logging.ERROR, logger="gateway.policy")
    write(policy_file, policy_text(2000) + "    prefer: [vllm-mtp]\n")
    assert watcher.poll() is None  # applied once stable for one poll
    result = watcher.poll()
    assert result is not None and not result.ok
    assert threshold(watcher) == 1000 and result.loaded is watcher.current
    expected = f"{policy_file}:7: profiles.1.prefer.0: unknown backend 'vllm-mtp'; did you mean 'spark-a'?"
    assert result.errors[0].startswith(expected)
    assert reloads.calls == [("error", result.errors[0])] and watcher.last_error == result.errors[0]
    assert any(
        expected in r.getMessage() and "keeping the last good" in r.getMessage() for r in caplog.records
    )
    write(policy_file, policy_text(2000) + "    prefer: [spark-b]\n")
    assert watcher.reload().ok and threshold(watcher) == 2000


def test_a_policy_naming_a_backend_the_config_lacks_refuses_to_start(policy_file: Path) -> None:
    policy_file.write_text(policy_text(1) + "    avoid: [spark-c]\n")
    with pytest.raises(PolicyError, match=r":7: profiles.1.avoid.0: unknown backend 'spark-c'"):
        PolicyWatcher(policy_file, known=KNOWN)
    assert PolicyWatcher(policy_file).current.policy.profiles[1].avoid == ["spark-c"]  # unchecked alone


def test_a_backend_no_profile_reaches_is_logged_but_the_policy_is_used(
    policy_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.policy")
    watcher = PolicyWatcher(policy_file, known=KNOWN)
    assert caplog.records == []
    avoid = "    avoid: [spark-b]\n"
    write(policy_file, policy_text(1).replace("  - name: long\n", "  - name: long\n" + avoid) + avoid)
    result = watcher.reload()
    assert result.ok and threshold(watcher) == 1
    warning = (
        f"policy {policy_file}:2: warning: profiles: no profile can reach backend 'spark-b', so it never "
        "serves: long avoids 'spark-b'; default avoids 'spark-b'"
    )
    assert [r.getMessage() for r in caplog.records] == [warning]
    PolicyWatcher(policy_file, known=KNOWN)  # and at start
    assert [r.getMessage() for r in caplog.records] == [warning, warning]
