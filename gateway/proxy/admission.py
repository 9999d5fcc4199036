"""Admission: per-backend concurrency slots and a bounded FIFO wait queue per model pool.

A request takes a slot on one backend before it is dispatched; the slot is the router's load signal
(in-flight is counted from that moment, streams and retries included) and is given back when the
response ends. A slot is one count of the backend's in-flight count (backends/inflight.py, the
registry's): admission keeps limits, readiness and queues, never a count of its own. When none of the
request's acceptable backends has a free slot, or none of them is ready yet (warming up), the request
waits in its pool's queue until a slot is handed to it or its deadline passes. A full queue refuses at
once.

Freed slots are handed over directly (the in-flight count never drops and rises again), to the oldest
waiter that can use that backend, so exactly one waiter wakes per freed slot. Every structure is bounded:
slots by each backend's limit, waiters by each pool's queue size.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import TracebackType

from gateway.backends.inflight import InFlight


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    max_queue: int = 64  # waiters per pool; one more is refused at once
    queue_timeout_seconds: float = 30.0  # default wait deadline
    retry_after_seconds: int = 1  # Retry-After advertised with a refusal

    def __post_init__(self) -> None:
        if self.max_queue < 0 or self.queue_timeout_seconds < 0 or self.retry_after_seconds < 0:
            raise ValueError("max_queue, queue_timeout_seconds and retry_after_seconds must be >= 0")


@dataclass(frozen=True, slots=True)
class Refused:
    """Admission said no. The core answers `status` with a Retry-After header and an OpenAI-style body."""

    status: int  # 429 queue full, 503 deadline passed
    code: str  # "queue_full" | "queue_timeout"
    message: str
    retry_after: int


@dataclass(frozen=True, slots=True)
class BackendLoad:
    """One backend's admission state as plain data."""

    inflight: int
    limit: int | None
    ready: bool


@dataclass(frozen=True, slots=True)
class PoolQueue:
    """One pool's wait queue as plain data."""

    waiting: int
    max_queue: int


def queue_timeout_message(pool: str, deadline: float) -> str:
    """Why a waiter was refused when its deadline passed: no acceptable backend had a free slot."""
    return f"no backend of model '{pool}' had room within {deadline:g}s"


class Slot:
    """One taken concurrency slot on `backend`. Release it exactly once; later releases do nothing, so
    `finally: slot.release()` is always safe. Also an async context manager."""

    __slots__ = ("backend", "_admission", "_released")

    def __init__(self, admission: Admission, backend: str) -> None:
        self.backend = backend
        self._admission = admission
        self._released = False

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._admission._free(self.backend)

    async def __aenter__(self) -> Slot:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


@dataclass
class _Backend:
    limit: int | None
    ready: bool = False
    retired: bool = False  # removed from the configuration; dropped when its last slot is released
    gone: bool = False  # nothing listens at its URL (Status.UNREACHABLE): not worth waiting for

    def has_room(self, inflight: int) -> bool:
        return self.ready and not self.retired and (self.limit is None or inflight < self.limit)


@dataclass(eq=False)
class _Waiter:
    seq: int
    pool: str
    acceptable: frozenset[str]
    future: asyncio.Future[Slot | None] = field(repr=False)  # None: the deadline passed


class Admission:
    """Slots and queues for all backends and pools. One instance per app, made by the composition root,
    counting on the registry's `inflight` (without one, on a count of its own: admission alone)."""

    def __init__(self, config: AdmissionConfig | None = None, inflight: InFlight | None = None) -> None:
        self.config = config or AdmissionConfig()
        self.counts = InFlight() if inflight is None else inflight
        self._backends: dict[str, _Backend] = {}
        self._queues: dict[str, deque[_Waiter]] = {}
        self._seq = itertools.count()

    # -- configuration and readiness (from settings and the prober) --

    def configure(self, backends: dict[str, int | None]) -> None:
        """Set the backends and their max concurrency (None: no gateway-side limit). A backend no longer
        listed takes no new request and is forgotten when its last slot is released; kept backends keep
        their in-flight count and readiness."""
        for name, limit in backends.items():
            state = self._backends.setdefault(name, _Backend(limit))
            state.limit, state.retired = limit, False
            self._grant(name)  # a raised limit makes room
        for name, state in list(self._backends.items()):
            if name not in backends:
                state.retired = True
                if self.counts[name] == 0:
                    del self._backends[name]

    def set_ready(self, backend: str, ready: bool) -> None:
        """The prober's readiness: a backend that becomes ready serves its waiters at once."""
        state = self._backends.get(backend)
        if state is None or state.ready == ready:
            return
        state.ready = ready
        if ready:
            self._grant(backend)

    def set_gone(self, backend: str, gone: bool) -> None:
        """The prober found nothing listening at `backend` (or something again). A waiter whose every
        acceptable backend is gone stops waiting at once, as if its deadline had passed: its caller
        then says why (proxy/attempts.py), rather than after the whole queue deadline."""
        state = self._backends.get(backend)
        if state is None or state.gone == gone:
            return
        state.gone = gone
        if not gone:
            return
        for queue in self._queues.values():
            for waiter in [w for w in queue if backend in w.acceptable]:
                if all(self._gone(name) for name in waiter.acceptable):
                    self._expire(waiter)

    def _gone(self, backend: str) -> bool:
        state = self._backends.get(backend)
        return state is not None and state.gone

    # -- taking slots --

    def try_acquire(self, backends: Iterable[str]) -> Slot | None:
        """A slot on the first of `backends` (best first) with room, without waiting: for failover."""
        for name in backends:
            state = self._backends.get(name)
            if state is not None and state.has_room(self.counts[name]):
                self.counts.add(name)
                return Slot(self, name)
        return None

    async def acquire(
        self, pool: str, backends: Iterable[str], timeout: float | None = None
    ) -> Slot | Refused:
        """A slot on one of `backends` (ranked best first), waiting in `pool`'s queue if needed.

        Waiting ends when a slot of an acceptable backend is freed or one of them becomes ready (the
        oldest waiter that can use it is served first), or after `timeout` seconds (default from the
        config). A cancelled caller (client gone) leaves the queue and never keeps a slot."""
        ranked = list(backends)
        slot = self.try_acquire(ranked)
        if slot is not None:
            return slot
        queue = self._queues.setdefault(pool, deque())
        if len(queue) >= self.config.max_queue:
            message = f"the queue of model '{pool}' is full ({len(queue)} waiting)"
            return self._refuse(429, "queue_full", message)
        loop = asyncio.get_running_loop()
        waiter = _Waiter(next(self._seq), pool, frozenset(ranked), loop.create_future())
        queue.append(waiter)
        deadline = self.config.queue_timeout_seconds if timeout is None else timeout
        timer = loop.call_later(deadline, self._expire, waiter)
        try:
            granted = await waiter.future
        except asyncio.CancelledError:
            self._abandon(waiter)
            raise
        finally:
            timer.cancel()
        if granted is None:
            return self._refuse(503, "queue_timeout", queue_timeout_message(pool, deadline))
        return granted

    # -- plain-data views --

    def inflight(self, backend: str) -> int:
        return self.counts[backend] if backend in self._backends else 0

    def backends(self) -> dict[str, BackendLoad]:
        return {n: BackendLoad(self.counts[n], b.limit, b.ready) for n, b in self._backends.items()}

    def queues(self) -> dict[str, PoolQueue]:
        return {pool: PoolQueue(len(q), self.config.max_queue) for pool, q in self._queues.items()}

    # -- internals --

    def _refuse(self, status: int, code: str, message: str) -> Refused:
        return Refused(status, code, message, self.config.retry_after_seconds)

    def _dequeue(self, waiter: _Waiter) -> None:
        queue = self._queues.get(waiter.pool)
        if queue is not None and waiter in queue:
            queue.remove(waiter)

    def _expire(self, waiter: _Waiter) -> None:
        if not waiter.future.done():
            self._dequeue(waiter)
            waiter.future.set_result(None)

    def _abandon(self, waiter: _Waiter) -> None:
        """The waiting caller was cancelled. If a slot reached it in the same loop turn, pass it on."""
        self._dequeue(waiter)
        future = waiter.future
        if not future.done():
            future.cancel()
        elif not future.cancelled():
            granted = future.result()
            if granted is not None:
                granted.release()

    def _free(self, backend: str) -> None:
        """A slot of `backend` is given back: straight to the oldest waiter that can use it (the count
        stays as it is), or else off the count."""
        state = self._backends.get(backend)
        if state is not None and state.has_room(self.counts[backend] - 1):
            waiter = self._oldest_waiter_for(backend)
            if waiter is not None:
                self._give(waiter, backend)
                return
        self.counts.remove(backend)
        if state is not None and state.retired and self.counts[backend] == 0:
            del self._backends[backend]

    def _grant(self, backend: str) -> None:
        """Hand free slots of `backend` to the oldest waiters that accept it, one slot per waiter."""
        state = self._backends.get(backend)
        while state is not None and state.has_room(self.counts[backend]):
            waiter = self._oldest_waiter_for(backend)
            if waiter is None:
                return
            self.counts.add(backend)
            self._give(waiter, backend)

    def _give(self, waiter: _Waiter, backend: str) -> None:
        self._dequeue(waiter)
        waiter.future.set_result(Slot(self, backend))

    def _oldest_waiter_for(self, backend: str) -> _Waiter | None:
        best: _Waiter | None = None
        for queue in self._queues.values():
            for waiter in queue:  # FIFO: the first match in a queue is that queue's oldest
                if backend in waiter.acceptable and not waiter.future.done():
                    if best is None or waiter.seq < best.seq:
                        best = waiter
                    break
        return best
