"""api/body_parse.py: bodies bounded in values before parsing, parsed to orjson's result, big ones under a
byte budget and freed in steps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import orjson
import pytest

from gateway.api.body_parse import BATCH, BadJson, BodyParser, ByteBudget, values_bound
from gateway.api.request_checks import MAX_VALUES, BodyLimits

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
@pytest.mark.parametrize("offload", [0, 1 << 20])
async def test_a_body_parses_to_orjsons_result_inline_or_offloaded(raw: bytes, offload: int) -> None:
    parser = BodyParser(BodyLimits(), offload_bytes=offload, budget_bytes=1 << 20)
    assert (await parser.parse(raw)).body == orjson.loads(raw)


@pytest.mark.parametrize("raw", BAD)
@pytest.mark.parametrize("offload", [0, 1 << 20])
async def test_invalid_json_is_bad_json_never_another_exception(raw: bytes, offload: int) -> None:
    parser = BodyParser(BodyLimits(), offload_bytes=offload, budget_bytes=1 << 20)
    with pytest.raises(BadJson):
        await parser.parse(raw)


@pytest.mark.parametrize("raw", [b"[]", b"[1,2]", b'{"a":[1,{"b":2},[3,4]],"c":{}}', b'{"s":"x"}'])
def test_the_values_bound_is_never_under_the_count_of_values(raw: bytes) -> None:
    def count(value: object) -> int:
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
        return 1 + sum(count(child) for child in children)

    assert 1 + values_bound(raw) >= count(orjson.loads(raw))


@pytest.mark.parametrize(
    "field, items",
    [("x", b"0"), ("prompt", b"123456")],  # an unknown array of zeros; a prompt of token ids
)
async def test_a_body_of_too_many_values_is_refused_before_parsing_in_milliseconds(
    field: str, items: bytes
) -> None:
    raw = b'{"model":"m","' + field.encode() + b'":[' + b",".join([items] * 2_000_000) + b"]}"
    parser = BodyParser(BodyLimits(), offload_bytes=256 * 1024, budget_bytes=64 << 20)
    began = time.process_time()
    parsed = await parser.parse(raw)
    cpu = time.process_time() - began
    assert parsed.body is None and parsed.problem is not None
    assert f"more than {MAX_VALUES} JSON values" in parsed.problem[0]
    assert cpu < 0.2  # one pass of bytes.count; a parse of two million items costs several times this


async def test_a_body_within_the_values_limit_is_parsed_whole() -> None:
    raw = orjson.dumps({"model": "m", "prompt": list(range(200_000))})
    parser = BodyParser(BodyLimits(max_values=200_010), offload_bytes=1024, budget_bytes=64 << 20)
    parsed = await parser.parse(raw)
    assert parsed.problem is None and parsed.body["prompt"][-1] == 199_999
    tight = BodyParser(BodyLimits(max_values=100_000), offload_bytes=1 << 30, budget_bytes=64 << 20)
    assert (await tight.parse(raw)).problem is not None  # the bound holds for inline parses too


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
