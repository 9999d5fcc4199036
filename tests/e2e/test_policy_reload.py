"""Hot reload under load: the policy file is rewritten 20 times while requests stream through the gateway.
No request fails; the one invalid rewrite is refused (logged with its line, counted as an error, the last
good policy kept) and the next valid one is in force within 2 s."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from e2e_harness import Stack, gateway_over_fleet, send, text_messages
from prometheus_client.parser import text_string_to_metric_families

REWRITES = 20
INVALID = 10  # the rewrite that breaks the file
APPLY_WITHIN_S = 2.0
WORKERS = 4

TEMPLATE = """version: 1
description: rewrite {index}
profiles:
  - name: chat
    when:
      {condition}: {{gte: 1}}
    prefer: [fp8-mtp, fp8-base]
  - name: default
    prefer: [{first}, {second}]
"""
INVALID_LINE = 6  # the `when` condition's line in TEMPLATE


def version(index: int) -> str:
    """Rewrite `index`: even ones send a lone request to fp8-mtp, odd ones to fp8-base."""
    first, second = ("fp8-mtp", "fp8-base") if index % 2 == 0 else ("fp8-base", "fp8-mtp")
    condition = "pool_inflightz" if index == INVALID else "pool_inflight"
    return TEMPLATE.format(index=index, condition=condition, first=first, second=second)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write_atomically(path: Path, text: str) -> None:
    # What editors and config managers do: the watcher never sees a half-written file.
    scratch = path.with_suffix(".tmp")
    scratch.write_text(text)
    os.replace(scratch, path)


async def policy_in_force(stack: Stack) -> str:
    body = {"model": stack.model, "messages": text_messages(64)}
    explained = (await stack.http.post("/gateway/explain", json=body)).json()
    return str(explained["policy"]["sha256"])


async def wait_in_force(stack: Stack, text: str) -> float:
    """Seconds until the gateway's policy in force is `text`."""
    start = time.monotonic()
    async with asyncio.timeout(APPLY_WITHIN_S + 3):
        while await policy_in_force(stack) != sha(text):
            await asyncio.sleep(0.02)
    return time.monotonic() - start


async def reload_errors(stack: Stack) -> float:
    exposition = (await stack.http.get("/metrics")).text
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == "gateway_policy_reloads_total" and sample.labels == {"result": "error"}:
                return sample.value
    return 0.0


@contextlib.asynccontextmanager
async def streaming_load(stack: Stack, outcomes: list[str]) -> AsyncIterator[None]:
    """WORKERS clients each streaming one request after another until the block ends."""
    stop = asyncio.Event()

    async def worker(seed: int) -> None:
        while not stop.is_set():
            try:
                routed = await send(stack, text_messages(256, seed=seed), 32)
                ok = routed.completion_tokens == 32
                outcomes.append("ok" if ok else f"short answer from {routed.backend}")
            except Exception as exc:  # every failure is reported, none may happen
                outcomes.append(f"{type(exc).__name__}: {exc}")

    tasks = [asyncio.create_task(worker(i)) for i in range(WORKERS)]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def rewrite_all(stack: Stack, policy: Path, caplog: pytest.LogCaptureFixture) -> None:
    for index in range(1, REWRITES + 1):
        text = version(index)
        if index == INVALID:
            good = version(index - 1)
            await wait_in_force(stack, good)
            errors_before = await reload_errors(stack)
            write_atomically(policy, text)
            async with asyncio.timeout(APPLY_WITHIN_S):
                while await reload_errors(stack) == errors_before:
                    await asyncio.sleep(0.02)
            assert await reload_errors(stack) == errors_before + 1
            assert await policy_in_force(stack) == sha(good)  # the last good one stays
            rejected = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
            assert len(rejected) == 1
            assert f"{policy}:{INVALID_LINE}: profiles.0.when.pool_inflightz: unknown field" in rejected[0]
        elif index == INVALID + 1:
            write_atomically(policy, text)
            applied = await wait_in_force(stack, text)
            logging.getLogger(__name__).info("valid rewrite after the invalid one applied in %.3f s", applied)
            assert applied < APPLY_WITHIN_S
        else:
            write_atomically(policy, text)
            await asyncio.sleep(0.2)


async def test_twenty_rewrites_under_load_fail_no_request_and_the_invalid_one_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(version(0))
    outcomes: list[str] = []
    caplog.set_level(logging.ERROR, logger="gateway.policy")
    async with gateway_over_fleet("spark-duo-35b", policy=policy) as stack:
        async with streaming_load(stack, outcomes):
            await rewrite_all(stack, policy, caplog)
        # The last rewrite (even) puts fp8-mtp first: a lone request after the load goes there.
        await wait_in_force(stack, version(REWRITES))
        assert (await send(stack, text_messages(256), 8)).backend == "fp8-mtp"
    failures = [o for o in outcomes if o != "ok"]
    assert not failures, failures[:5]
    assert len(outcomes) >= 20


async def test_a_reload_applies_the_new_preference_to_the_next_request(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(version(0))
    async with gateway_over_fleet("spark-duo-35b", policy=policy) as stack:
        assert (await send(stack, text_messages(256), 8)).backend == "fp8-mtp"
        policy.write_text(version(1))
        response = await stack.http.post("/gateway/policy/reload")
        assert response.json()["status"] == "ok"
        assert response.json()["changed"] is True
        assert (await send(stack, text_messages(256), 8)).backend == "fp8-base"
