"""Attempts: where a request goes next, and how long it may wait for a backend to come back.

- Candidates are tried in the router's order, at most `max_attempts` of them. Each attempt is given a
  backend with its in-flight count already taken: an admission slot (waiting in the pool's queue when
  every acceptable backend is full or still warming up) or, without admission, a hold on the count.
- The first attempt waits `warming_wait_s` when every candidate is warming up, and such a wait that
  ends with all of them still warming is answered 503 `backends_warming`, never as a lack of room.
- Failover goes to a backend that serves now; when none does, it waits (bounded) for one to come back.
- When every candidate failed or the attempts are spent: a comeback wait within the request's queue
  deadline (`Failover._comeback`), else the last failure is the answer.
- Circuit breakers: an open breaker fails the attempt at once (it may recover: its cool-down ends), and
  every attempt's outcome is recorded on its backend's breaker.
"""

from __future__ import annotations

import asyncio

from gateway.backends.inflight import Hold
from gateway.backends.registry import Registry, Status
from gateway.clock import monotonic
from gateway.proxy.admission import Refused, Slot
from gateway.proxy.breaker import Outcome, Ticket
from gateway.proxy.exchange import AttemptFailed, Job
from gateway.proxy.reliability import Reliability

NO_BACKEND_LEFT = "no_backend_left"
# A backend that reset the connection before answering is tried again after this pause: long enough for a
# crash to show as a refused connection or a restart to reach the prober, short against a queue deadline.
RESET_RETRY_S = 0.25

Taken = Slot | Hold  # a backend with this request counted on it; released when the attempt ends


class Tries:
    """One request's attempts so far: where they went, in order, the last failure, and the backends whose
    latest failure proves no death (they may serve again soon). `started` (gateway.clock.monotonic) is
    when its waits count from: the request's arrival, or the break of a stream being continued
    (`after_cut`)."""

    __slots__ = ("tried", "last", "may_recover", "first_5xx", "started", "cut")

    def __init__(self, started: float | None = None) -> None:
        self.started = monotonic() if started is None else started
        self.cut: str | None = None  # why the stream being continued broke
        self.tried: list[str] = []
        self.last: AttemptFailed | None = None
        self.may_recover: set[str] = set()
        # An engine's 5xx that may be the input's fault, its breaker outcome held until another engine
        # has judged the same request (proxy/dispatch.py): where, its breaker ticket, the failure.
        self.first_5xx: tuple[str, Ticket | None, AttemptFailed] | None = None

    def after_cut(self, why: str) -> Tries:
        """The attempts of a continuation of the stream that broke (`why`): fresh waits, from now, and
        never the backends tried already."""
        tries = Tries()
        tries.tried, tries.cut = list(self.tried), why
        return tries

    def failed(self, backend: str, failed: AttemptFailed) -> None:
        self.last = failed
        if failed.may_recover:
            self.may_recover.add(backend)
        else:
            self.may_recover.discard(backend)


class Failover:
    """The attempts policy over one registry; `reliability` None: no admission and no breakers.

    `first_content_s`: a request's whole time for its first content, from its arrival (the longest queue
    wait plus the first-token timeout): every attempt's wait for the first content is bounded by what is
    left of it (`first_content_at`), and once it is spent no further attempt starts; the last failure is
    the answer. Without it, each failover would start a fresh first-token wait, so a request bounced
    between failing backends could wait several of them end to end. None: no such bound."""

    def __init__(
        self,
        registry: Registry,
        reliability: Reliability | None,
        max_attempts: int,
        first_content_s: float | None = None,
    ) -> None:
        self.registry = registry
        self.reliability = reliability
        self.max_attempts = max_attempts
        self.first_content_s = first_content_s

    def first_content_at(self, tries: Tries) -> float | None:
        """The loop time by which the request's first content must have come; None: unbounded."""
        if self.first_content_s is None:
            return None
        left = self.first_content_s - (monotonic() - tries.started)
        return asyncio.get_running_loop().time() + left

    async def next(self, job: Job, tries: Tries) -> Taken | Refused:
        """Where the next attempt goes, counted there, or why none can be made."""
        if tries.tried and self._first_content_spent(tries):
            return no_backend_left()  # its time for a first content is over: the last failure answers
        remaining = [b for b in job.ranked if b not in tries.tried]
        spent = not remaining or len(tries.tried) >= self.max_attempts
        reliability = self.reliability
        if reliability is None:
            return no_backend_left() if spent else self.registry.inflight.hold(remaining[0])
        if spent:
            return await self._comeback(job, reliability, tries)
        if not tries.tried:
            return await _first_slot(job, remaining, reliability)
        # Fail over to a backend that serves now; when none does, wait (bounded) for one to come back.
        ready = [b for b in remaining if self._is_ready(b)]
        left = _queue_time_left(tries, reliability)
        got = await reliability.admission.acquire(job.pool.model, ready or remaining, left)
        return _warming_if_so(job, ready or remaining, reliability, got)

    def ticket(self, backend: str) -> Ticket | None:
        """The breaker's permission; AttemptFailed when it is open (or its half-open probe is taken)."""
        if self.reliability is None or backend not in self.reliability.breakers:
            return None
        ticket = self.reliability.breakers[backend].allow()
        if ticket is None:
            failed = AttemptFailed("circuit breaker open", 503)
            failed.may_recover = True  # its cool-down ends, then a probe goes through
            raise failed
        return ticket

    def settle(self, backend: str, ticket: Ticket | None, outcome: Outcome) -> None:
        """Record the attempt's outcome on the backend's breaker."""
        if ticket is not None and self.reliability is not None:
            self.reliability.breakers[backend].record(ticket, outcome)

    async def _comeback(self, job: Job, reliability: Reliability, tries: Tries) -> Slot | Refused:
        """Every candidate failed (or the attempts are spent): wait, within the request's queue deadline
        (counted from its arrival), for a candidate that may serve again, and go there. A backend that is
        down but may come back (warming up, restarting) is taken as soon as it is ready; one that reset
        the connection before answering (it may be restarting, unseen yet) after a short pause; one
        whose breaker is open once its cool-down lets a probe through; one found stalled (an attempt
        there was cut) once its stall mark lifts. Nothing to wait for: the last
        failure is the answer. The deadline passes: 503 `queue_timeout`, as for any queued request."""
        may_recover = tries.may_recover
        while True:
            left = _queue_time_left(tries, reliability)
            restarting = [b for b in job.ranked if self.registry.may_come_back(b)]
            # Ready ones: a stalled one among them is waited for until its mark lifts (its next byte).
            alive = [b for b in job.ranked if b in may_recover and self._status(b) is Status.READY]
            if left <= 0:
                if not restarting and not alive:
                    return no_backend_left()
                return reliability.warming_refusal(job.pool.model, job.ranked) or _queue_timeout(reliability)
            soon = [t for t in (_retry_in(b, reliability) for b in alive) if t < left]
            if not restarting and not soon:
                return no_backend_left()
            pause = min(soon, default=left)
            if restarting:
                got = await reliability.admission.acquire(job.pool.model, restarting, pause)
                if isinstance(got, Slot) or got.code != "queue_timeout":
                    return got
            else:
                await asyncio.sleep(pause)
            open_now = [b for b in alive if self._is_ready(b) and not reliability.breaker_open(b)]
            slot = reliability.admission.try_acquire(open_now)
            if slot is not None:
                return slot

    def _first_content_spent(self, tries: Tries) -> bool:
        limit = self.first_content_s
        return limit is not None and monotonic() - tries.started >= limit

    def _is_ready(self, backend: str) -> bool:
        state = self.registry.backends[backend]
        return state.status is Status.READY and state.stalled_since is None  # a stalled one: not now

    def _status(self, backend: str) -> Status:
        return self.registry.backends[backend].status


async def _first_slot(job: Job, ranked: list[str], reliability: Reliability) -> Slot | Refused:
    """The first attempt's slot. When every candidate is warming up, the request waits
    `warming_wait_s` for the first to be ready, and a wait that ends with all of them still warming
    is answered 503 `backends_warming` with their expected time left, never as a lack of room."""
    warming = reliability.warmups.all_warming(ranked)
    wait = reliability.warming_wait_s if warming else None
    got = await reliability.admission.acquire(job.pool.model, ranked, wait)
    return _warming_if_so(job, ranked, reliability, got)


def _retry_in(backend: str, reliability: Reliability) -> float:
    """How long before a ready backend that failed without proof of death is worth another try."""
    if backend in reliability.breakers and reliability.breaker_open(backend):
        cooldown = reliability.breakers[backend].snapshot().retry_in_seconds
        return cooldown if cooldown > 0 else RESET_RETRY_S  # half-open, its probe taken
    return RESET_RETRY_S


def _warming_if_so(
    job: Job, waited_for: list[str], reliability: Reliability, got: Slot | Refused
) -> Slot | Refused:
    """A wait that ran out while every backend waited for is still warming up is a warm-up, not a lack
    of room: 503 `backends_warming` with the time left instead of `queue_timeout`."""
    if isinstance(got, Refused) and got.code == "queue_timeout":
        pool = job.pool.model
        return (
            reliability.warming_refusal(pool, waited_for)
            or reliability.unreachable_refusal(pool, waited_for)
            or got
        )
    return got


def no_backend_left() -> Refused:
    return Refused(502, NO_BACKEND_LEFT, "no other backend can take this request", 1)


def _queue_timeout(reliability: Reliability) -> Refused:
    config = reliability.admission.config
    message = f"no backend came back within the queue deadline of {config.queue_timeout_seconds:g}s"
    return Refused(503, "queue_timeout", message, config.retry_after_seconds)


def _queue_time_left(tries: Tries, reliability: Reliability) -> float:
    """What is left of the request's queue deadline, counted from its arrival (or the break of the stream
    being continued)."""
    timeout = reliability.admission.config.queue_timeout_seconds
    return timeout - (monotonic() - tries.started)
