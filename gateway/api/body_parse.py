"""Parsing a request body without stalling the streams the event loop is relaying.

orjson parses a 30 MB body of a million tiny messages in about a second, in one C call that holds the
GIL, so neither the loop nor a worker thread can run meanwhile (measured: a 0.87 s gap in a 1 ms ticker
with `asyncio.to_thread(orjson.loads, ...)`). Small bodies are still parsed inline with orjson (microseconds).
A body of at least `offload_bytes` is parsed here in bounded steps: the top-level object key by key and
its top-level arrays (`messages`, `tools`, `prompt`, ...) item by item, each value one call of the
standard library's C scanner, yielding to the loop every `BATCH` items. The arrays with a count limit
stop at the first item past it, so a body of a million messages is refused after 4,097 of them: neither
the time nor the memory of the whole tree is spent. The checks that walk the tree then run in a worker
thread (plain Python gives the loop the GIL every few milliseconds), no cyclic collection runs while the
tree grows, and its arrays are freed in batches afterwards (`dispose`). A byte budget bounds how much body
is being read and parsed at once, so six huge bodies at once take turns instead of all the memory.

What stays one step: a single value that is neither the body nor one of its top-level arrays (say, one
tool schema of a million keys) is parsed in one call; the body size limit bounds it.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import json
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.api.request_checks import BodyLimits, Problem, check_body
from gateway.settings import Limits as LimitSettings

# Set while a request holds a reservation: the task's context, so its parse does not reserve twice.
_HELD: contextvars.ContextVar[bool] = contextvars.ContextVar("body_budget_held", default=False)
BATCH = 1024  # array items parsed between two yields to the loop (about 1 ms of tiny messages)
_SPACE = re.compile(r"[ \t\n\r]*")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")  # orjson refuses NaN and Infinity too


_scan_once = json.JSONDecoder(parse_constant=_no_constants).scan_once  # type: ignore[attr-defined]


def _scan(text: str, i: int) -> tuple[Any, int]:
    """One JSON value at `i` and the index after it (StopIteration cannot cross a coroutine)."""
    try:
        return _scan_once(text, i)  # type: ignore[no-any-return]
    except StopIteration as stop:
        raise json.JSONDecodeError("expected a value", text, stop.value) from None


class BadJson(Exception):
    """The body is not JSON; the message says why, for the client's 400."""


@dataclass(frozen=True, slots=True)
class Parsed:
    body: Any
    problem: Problem | None = None  # a count limit hit while parsing: the body is partial


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


class BodyParser:
    """Parse and check one completion body: inline below `offload_bytes`, in bounded steps above it."""

    def __init__(self, limits: BodyLimits, offload_bytes: int, budget_bytes: int) -> None:
        self.limits = limits
        self.offload_bytes = offload_bytes
        self.budget = ByteBudget(budget_bytes)
        # Top-level arrays whose length is limited: parsing stops at the first item past the limit.
        self.counted = {"messages": limits.max_messages, "tools": limits.max_tools}

    async def parse(self, raw: bytes) -> Parsed:
        """The body, or BadJson; `problem` set when a count limit was hit during parsing."""
        if len(raw) < self.offload_bytes:
            try:
                return Parsed(orjson.loads(raw))
            except orjson.JSONDecodeError as exc:
                raise BadJson(f"the body is not valid JSON: {exc}") from None
        async with self.reserved(len(raw)):
            return await self._parse_big(raw)

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

    async def _parse_big(self, raw: bytes) -> Parsed:
        # No cyclic collection while the tree grows: each full one would walk all of it on the loop
        # (measured: 100-120 ms each on a million messages). Only re-enabled by whoever disabled it.
        paused = gc.isenabled()
        gc.disable()
        try:
            return await parse_in_steps(raw, self.counted)
        finally:
            if paused:
                gc.enable()

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


async def parse_in_steps(raw: bytes, counted: Mapping[str, int]) -> Parsed:
    """Parse a JSON document, yielding to the loop between batches of top-level array items."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadJson(f"the body is not UTF-8: {exc}") from None
    await asyncio.sleep(0)  # decoding 30 MB is one copy: let the loop run before the first batch
    i = _SPACE.match(text, 0).end()  # type: ignore[union-attr]
    if not text.startswith("{", i):
        return Parsed(None)  # not an object: refused by the caller without parsing it
    try:
        return await _object(text, i + 1, counted)
    except (json.JSONDecodeError, ValueError, RecursionError) as exc:
        raise BadJson(f"the body is not valid JSON: {exc}") from None


async def _object(text: str, i: int, counted: Mapping[str, int]) -> Parsed:
    body: dict[str, Any] = {}
    i = _skip(text, i)
    if text.startswith("}", i):
        return Parsed(body, None) if _skip(text, i + 1) == len(text) else _trailing()
    while True:
        if not text.startswith('"', i):
            raise json.JSONDecodeError("expected a key", text, i)
        key, i = _scan(text, i)
        i = _skip(text, i)
        if not text.startswith(":", i):
            raise json.JSONDecodeError("expected ':'", text, i)
        i = _skip(text, i + 1)
        if text.startswith("[", i):
            value, i, problem = await _array(text, i + 1, key, counted.get(key))
            if problem is not None:
                body[key] = value
                return Parsed(body, problem)
        else:
            value, i = _scan(text, i)
        body[key] = value
        i = _skip(text, i)
        if text.startswith(",", i):
            i = _skip(text, i + 1)
            continue
        if text.startswith("}", i):
            return Parsed(body) if _skip(text, i + 1) == len(text) else _trailing()
        raise json.JSONDecodeError("expected ',' or '}'", text, i)


async def _array(text: str, i: int, key: str, limit: int | None) -> tuple[list[Any], int, Problem | None]:
    items: list[Any] = []
    add = items.append
    i = _skip(text, i)
    if text.startswith("]", i):
        return items, i + 1, None
    while True:
        value, i = _scan(text, i)
        add(value)
        if limit is not None and len(items) > limit:
            return items, i, (f"`{key}` has more than {limit} items, over the limit of {limit}", key)
        if len(items) % BATCH == 0:
            await asyncio.sleep(0)
        i = _skip(text, i)
        if text.startswith(",", i):
            i = _skip(text, i + 1)
            continue
        if text.startswith("]", i):
            return items, i + 1, None
        raise json.JSONDecodeError("expected ',' or ']'", text, i)


def _skip(text: str, i: int) -> int:
    return _SPACE.match(text, i).end()  # type: ignore[union-attr]


def _trailing() -> Parsed:
    raise BadJson("the body is not valid JSON: extra data after the object")


def body_parser(limits: LimitSettings) -> BodyParser:
    """The parser for the `limits:` settings section."""
    counts = BodyLimits(limits.max_depth, limits.max_messages, limits.max_tools, limits.max_parts)
    return BodyParser(counts, limits.parse_offload_bytes, limits.parse_budget_bytes)
