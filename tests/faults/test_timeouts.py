"""First-token vs idle-gap timeouts through the real gateway over the twin: a slow prefill (or a wait in
the engine's own queue) is governed by the generous first-token timeout, a silence after the first token
by the short idle gap. The twin sends headers and vLLM's empty role frame at once, before the prefill."""

from __future__ import annotations

import asyncio
import re
import time

from fault_rig import MODEL, fleet_spec, rig

from gateway.sim.perf import PerfSpec

# 60 simulated seconds of prefill per request: 1.2 s real at the rig's time scale of 50.
SLOW_PREFILL = PerfSpec(prefill_request_s=60.0)
CONTENT = re.compile(rb'"content":"[^"]')  # a frame carrying text (the role frame's content is empty)
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def test_a_prefill_longer_than_the_idle_gap_is_served() -> None:
    timeouts = {"first_byte_s": 5.0, "idle_s": 0.5}
    async with rig(fleet_spec("a", perf=SLOW_PREFILL), timeouts=timeouts) as r:
        answer = await r.chat(stream=True, max_tokens=16)
        backends = {b["name"]: b for b in (await r.get_json("/gateway/backends"))["backends"]}
    assert answer.stream_ok, answer.raw[-300:]
    assert answer.seconds > 1.0  # the first token really came later than the idle gap
    assert backends["a"]["breaker"]["consecutive_failures"] == 0


async def test_a_prefill_longer_than_the_first_token_timeout_is_cut() -> None:
    timeouts = {"first_byte_s": 0.5, "idle_s": 5.0}
    async with rig(fleet_spec("a", perf=SLOW_PREFILL), timeouts=timeouts) as r:
        answer = await r.chat(stream=True, max_tokens=16)
    # The role frame came at once but is held back with the head until content: nothing reached the
    # client, so the timeout is a failure before the first byte and, with no other backend, a clean 504.
    assert answer.status == 504 and answer.headers["content-type"] == "application/json"
    assert b"first-token timeout" in answer.raw and b'"role"' not in answer.raw
    assert answer.seconds < 1.1  # cut at the first-token timeout, not after the 1.2 s prefill


async def test_a_hang_after_the_first_token_is_cut_at_the_idle_gap() -> None:
    timeouts = {"first_byte_s": 5.0, "idle_s": 0.5}
    async with (
        rig(fleet_spec("a", perf=SLOW_PREFILL), timeouts=timeouts) as r,
        r.session.post(r.url + "/v1/chat/completions", json={**BODY, "max_tokens": 4000}) as resp,
    ):
        seen = b""
        async with asyncio.timeout(5):
            while not CONTENT.search(seen):
                seen += await resp.content.readany()
        r.fleet.engine("a").hang()
        hung_at = time.monotonic()
        async with asyncio.timeout(5):
            rest = await resp.content.read()
        cut_after = time.monotonic() - hung_at
    assert b"upstream_stream_error" in rest and b"idle timeout" in rest
    assert rest.rstrip().endswith(b"data: [DONE]")
    assert 0.3 < cut_after < 2.0  # the idle gap (0.5 s), far below the first-token timeout (5 s)


async def test_failovers_share_the_requests_time_for_its_first_content() -> None:
    """Three engines each slower to a first token than the first-token timeout: each failover used to
    start a fresh wait, three of them end to end. A request's whole time for its first content is its
    queue deadline plus one first-token timeout (0.3 + 0.5 s here), shared by its attempts."""
    timeouts = {"first_byte_s": 0.5, "idle_s": 5.0}
    settings = {"timeouts": timeouts, "queue": {"timeout_s": 0.3}, "limits": {"max_attempts": 3}}
    async with rig(fleet_spec("a", "b", "c", perf=SLOW_PREFILL), stall={"enabled": False}, **settings) as r:
        answer = await r.chat(stream=True, max_tokens=16)
    assert answer.status == 504 and b"first-token timeout" in answer.raw, answer.raw[-300:]
    assert answer.seconds < 1.15, answer.seconds  # 0.8 s of budget, not three times 0.5 s
