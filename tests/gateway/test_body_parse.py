"""api/body_parse.py: big bodies parsed in steps, to the same result as orjson, stopping at count limits,
yielding to the loop, under a byte budget."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import orjson
import pytest

from gateway.api.body_parse import BATCH, BadJson, BodyParser, ByteBudget, parse_in_steps
from gateway.api.request_checks import BodyLimits

DOCS = [
    b"{}",
    b' { "a" : [ ] , "b":[1, {"x":[2, 3.5e2]}] ,"c":{"d":null}, "e": true} ',
    b'{"model":"m","messages":[{"role":"user","content":"h\\u00e9 \\"q\\""}],"stream":false}',
    '{"k":"ünï"}'.encode(),
]
BAD = [
    b"{",
    b'{"a":}',
    b'{"a":1,}',
    b'{"a":[1,]}',
    b'{"a":1} x',
    b'{"a":NaN}',
    b'{"a":Infinity}',
    b'\xff{"a":1}',
    b'{"a":[1 2]}',
    b'{"a"',
    b'{"a":[',
    b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}",
]


@pytest.mark.parametrize("raw", DOCS)
async def test_a_body_parsed_in_steps_equals_orjsons_parse(raw: bytes) -> None:
    assert (await parse_in_steps(raw, {})).body == orjson.loads(raw)


@pytest.mark.parametrize("raw", BAD)
async def test_invalid_json_is_bad_json_never_another_exception(raw: bytes) -> None:
    with pytest.raises(BadJson):
        await parse_in_steps(raw, {})


async def test_a_body_that_is_not_an_object_is_not_parsed() -> None:
    assert (await parse_in_steps(b" [1, 2, 3]", {})).body is None


async def test_parsing_stops_at_the_first_item_past_a_count_limit() -> None:
    raw = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}] * 50_000})
    parsed = await parse_in_steps(raw, {"messages": 100})
    assert parsed.problem == ("`messages` has more than 100 items, over the limit of 100", "messages")
    assert len(parsed.body["messages"]) == 101  # nothing parsed past the limit


@asynccontextmanager
async def loop_turns() -> AsyncIterator[Callable[[], int]]:
    """The turns the event loop made while the block ran: a task that yields and counts, forever."""
    turns = 0

    async def count() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    task = asyncio.create_task(count())
    await asyncio.sleep(0)  # the counter is running before the block starts
    start = turns
    try:
        yield lambda: turns - start
    finally:
        task.cancel()


async def test_the_loop_runs_between_batches_of_items() -> None:
    raw = orjson.dumps({"messages": [{"role": "user", "content": "x"}] * (BATCH * 20)})
    async with loop_turns() as turns:
        parsed = await parse_in_steps(raw, {})
    assert len(parsed.body["messages"]) == BATCH * 20
    assert turns() >= 20  # a turn of the loop at least every batch; orjson would give none


async def test_small_bodies_are_parsed_inline_big_ones_in_steps_to_the_same_result() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}] * 2000}
    raw = orjson.dumps(body)
    inline = BodyParser(BodyLimits(), offload_bytes=len(raw) + 1, budget_bytes=1 << 20)
    stepped = BodyParser(BodyLimits(), offload_bytes=1024, budget_bytes=1 << 20)
    assert (await inline.parse(raw)).body == (await stepped.parse(raw)).body == body
    assert await stepped.check(body, len(raw)) is None  # the walk, in a worker thread
    limited = BodyParser(BodyLimits(max_messages=10), offload_bytes=1024, budget_bytes=1 << 20)
    assert (await limited.check(body, len(raw))) is not None


async def test_the_budget_lets_big_bodies_through_a_few_at_a_time() -> None:
    budget = ByteBudget(100)
    first = await budget.acquire(60)
    second = asyncio.create_task(budget.acquire(60))
    await asyncio.sleep(0.01)
    assert not second.done()  # 120 > 100: it waits
    await budget.release(first)
    assert await asyncio.wait_for(second, 1) == 60


async def test_a_body_bigger_than_the_budget_takes_all_of_it_and_still_gets_through() -> None:
    budget = ByteBudget(100)
    taken = await asyncio.wait_for(budget.acquire(10_000), 1)
    assert taken == 100 and budget.used == 100
    await budget.release(taken)
    assert budget.used == 0


async def test_dispose_empties_a_big_bodys_arrays_in_steps() -> None:
    parser = BodyParser(BodyLimits(), offload_bytes=10, budget_bytes=1 << 20)
    body = {"messages": [{"content": "x"}] * (BATCH * 3), "model": "m"}
    async with loop_turns() as turns:
        await parser.dispose(body, 1000)
    assert body["messages"] == [] and body["model"] == "m"
    assert turns() >= 2  # freed in batches, the loop running between them
