"""Parsing a request body: its size in values bounded before it is parsed, then one C call.

A JSON body costs in proportion to its values, not its bytes: 30 MB of `0,0,0,...` is 15 million of them.
So before any parse, the body's commas and opening brackets are counted with `bytes.count` (C, about 2 ms
per MB): as its chunks arrive (`ValueCounter`, the read's watch), or a megabyte at a time with the loop
running between (`over_values`). Every value after the first in an array or object follows a comma, and
every container opens with a bracket, so the count is at least the body's number of values (commas
inside strings add to it). A body over `max_values` is refused with a 400 having cost only that count; a
body under it is parsed by orjson in one call, whose time is then bounded too (about 0.1 s for a million
values as tiny objects, 20 ms for a million numbers). Parsing item by item in Python would yield to the
loop more often but costs ten times the CPU, which every other client pays under load.

Counting commas inside strings is what keeps the bound a single C pass; it refuses only text with more
commas than `max_values`, which no engine's context takes either (a comma is at least a token).

Bodies of at least `offload_bytes` are parsed with the cyclic collector paused (a full collection walks
the growing tree), checked in a worker thread (the walk is plain Python and gives the loop the GIL), and
freed in batches (`dispose`). A byte budget bounds how much body is being read and parsed at once, so six
huge bodies at once take turns instead of all the memory.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.api.request_checks import BodyLimits, Problem, check_body
from gateway.settings import Limits as LimitSettings

# Set while a request holds a reservation: the task's context, so its parse does not reserve twice.
_HELD: contextvars.ContextVar[bool] = contextvars.ContextVar("body_budget_held", default=False)
BATCH = 1024  # array items freed between two yields to the loop
SLICE = 1 << 20  # bytes counted between two yields to the loop (about 2 ms)


class BadJson(Exception):
    """The body is not JSON; the message says why, for the client's 400."""


@dataclass(frozen=True, slots=True)
class Parsed:
    body: Any
    problem: Problem | None = None  # a limit hit before parsing: the body is None


class ByteBudget:
    """At most `capacity` bytes of body being parsed at once; a body bigger than it takes it all."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._changed = asyncio.Condition()

    async def acquire(self, size: int) -> int:
        size = min(size, self.capacity)
        async with self._changed:
            await self._changed.wait_for(lambda: self.used + size <= self.capacity)
            self.used += size
        return size

    async def release(self, size: int) -> None:
        async with self._changed:
            self.used -= size
            self._changed.notify_all()


class TooManyValues(Exception):
    """The body holds more values than the limit; args[0] is the Problem for the client's 400."""


def _too_many(max_values: int) -> Problem:
    message = (
        f"the body holds more than {max_values} JSON values (counting its commas and brackets), "
        f"over the limit of {max_values}"
    )
    return message, None


class ValueCounter:
    """Counts a body's values bound chunk by chunk as it is read (`read_body`'s watch), so a body over
    the limit is refused before the rest of it is joined, kept or parsed."""

    def __init__(self, max_values: int) -> None:
        self.max_values = max_values
        self.count = 1  # the body itself

    def __call__(self, chunk: bytes) -> None:
        self.count += values_bound(chunk)
        if self.count > self.max_values:
            raise TooManyValues(_too_many(self.max_values))


def values_bound(raw: bytes, start: int = 0, end: int | None = None) -> int:
    """At least the number of JSON values that begin in raw[start:end]: its commas and opening brackets,
    strings included (a value after the first in a container follows a comma; a container opens)."""
    return raw.count(b",", start, end) + raw.count(b"[", start, end) + raw.count(b"{", start, end)


async def over_values(raw: bytes, max_values: int) -> Problem | None:
    """The 400 for a body that may hold more than `max_values` values; None when it cannot. Counted a
    slice at a time, the loop running between slices, and stopped as soon as the count passes the limit;
    a body shorter than the limit cannot pass it and is not counted."""
    if len(raw) <= max_values:
        return None
    count = 1  # the body itself
    for start in range(0, len(raw), SLICE):
        count += values_bound(raw, start, start + SLICE)
        if count > max_values:
            return _too_many(max_values)
        await asyncio.sleep(0)
    return None


def loads(raw: bytes) -> Any:
    """orjson's parse, or BadJson with its reason."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadJson(f"the body is not valid JSON: {exc}") from None


class BodyParser:
    """Parse and check one completion body: bounded in values first, then one orjson call."""

    def __init__(self, limits: BodyLimits, offload_bytes: int, budget_bytes: int) -> None:
        self.limits = limits
        self.offload_bytes = offload_bytes
        self.budget = ByteBudget(budget_bytes)

    def counter(self, declared: int | None) -> ValueCounter | None:
        """The watch to read a body with: None when its declared length cannot hold too many values."""
        if declared is not None and declared <= self.limits.max_values:
            return None
        return ValueCounter(self.limits.max_values)

    async def parse(self, raw: bytes, counted: bool = False) -> Parsed:
        """The body, or BadJson; `problem` set (and no body) when the body holds too many values.
        `counted`: the body was read under `counter`'s watch, its values bound already."""
        problem = None if counted else await over_values(raw, self.limits.max_values)
        if problem is not None:
            return Parsed(None, problem)
        if len(raw) < self.offload_bytes:
            return Parsed(loads(raw))
        async with self.reserved(len(raw)):
            return Parsed(_loads_uncollected(raw))

    @asynccontextmanager
    async def reserved(self, size: int) -> AsyncIterator[None]:
        """Hold `size` bytes of the budget (nothing for a small body). The route holds it from the read
        on when the client declared the size, so huge bodies are even read a few at a time (the others
        wait in the socket buffers); a nested reservation of the same request takes nothing more."""
        if size < self.offload_bytes or _HELD.get():
            yield
            return
        taken = await self.budget.acquire(size)
        token = _HELD.set(True)
        try:
            yield
        finally:
            _HELD.reset(token)
            await self.budget.release(taken)

    async def dispose(self, body: Any, size: int) -> None:
        """Free a big body's top-level arrays in batches: dropping a million dicts at once is one long
        deallocation on the loop. Call it once nothing else uses the body."""
        if size < self.offload_bytes or not isinstance(body, dict):
            return
        for value in body.values():
            if isinstance(value, list):
                while value:
                    del value[-BATCH:]
                    await asyncio.sleep(0)

    async def check(self, body: dict[str, Any], size: int) -> Problem | None:
        """check_body, in a worker thread for a big body (its walk is plain Python: the loop keeps turns)."""
        if size < self.offload_bytes:
            return check_body(body, self.limits)
        return await asyncio.to_thread(check_body, body, self.limits)


def _loads_uncollected(raw: bytes) -> Any:
    # No cyclic collection while the tree grows: each full one would walk all of it (measured: 100-120 ms
    # each on a million messages). Only re-enabled by whoever disabled it.
    paused = gc.isenabled()
    gc.disable()
    try:
        return loads(raw)
    finally:
        if paused:
            gc.enable()


def body_parser(limits: LimitSettings) -> BodyParser:
    """The parser for the `limits:` settings section."""
    counts = BodyLimits(
        limits.max_depth, limits.max_messages, limits.max_tools, limits.max_parts, limits.max_values
    )
    return BodyParser(counts, limits.parse_offload_bytes, limits.parse_budget_bytes)
