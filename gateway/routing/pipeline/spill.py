"""Overload spill: a ranking never piles onto a saturated backend while another one has room.

A backend is saturated when a request sent to it now would wait inside the engine instead of running:
- where its capacity is known, when the gateway's in-flight count to it is at or past it. The capacity
  is the smallest of its configured `max_concurrency`, the engine's own limit on running sequences
  (`engine_capacity`) and what the engine ran when last seen with a queue behind it (`engine_full_at`,
  learned from its metrics: vLLM does not say its max_num_seqs). The count is live, so each request is
  judged on the load of the moment: a backend takes requests again one by one as its own finish;
- where it is not known, when its engine says requests are already waiting (`engine_waiting` > 0, from
  its latest fresh report) while the gateway has requests in flight there (a report of a queue the
  gateway's own count says is gone is older than that count: a request caught between two engine steps
  by the scrape, since finished).

The report of a queue is up to a scrape interval old and says yes or no for all of that time: judged by
it alone, every request spilled while it said yes and none once it said no, traffic flipping wholesale
in blocks of seconds (p99 +24-34% against no spill), and a burst of 2,000 arriving between two scrapes
spilled nothing while the preferred engine queued 992. The learned capacity replaces it once known.

Spilling reorders a ranking so the backends with room come first, each group keeping its own order: the
best backend with room takes the request, and the saturated ones stay behind it as the failover order.
When every ranked backend is saturated, the request joins the shortest queue relative to what the
backend runs at once (queued / running: how many of its own batches a new request waits behind), ties in
ranking order: a preference decides between equals, never between a queue of 4 and a queue of 200.
Scores are untouched, so a profile that forbids spilling (`spill: false`) gets the plain ranking. Nor is
a ranking spilled whose first backend an adaptive prediction put there with its queue priced in (the
engine's waiting requests, its sequence limit: router._spilled): that price is the finer one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.records import BackendSnapshot, Spill


def capacity(b: BackendSnapshot) -> int | None:
    """How many requests the backend runs at once, where known: the tightest of the limits, the load its
    engine was last seen queueing at (`engine_full_at`) among them."""
    return _tightest(b.max_concurrency, b.engine_capacity, b.engine_full_at)


def announced_capacity(b: BackendSnapshot) -> int | None:
    """The sequences the backend runs at once as configured or as its engine says, where known: the
    limits a performance model can take as fixed. `engine_full_at` is a moment's load, which measured fits
    already price; taken as a limit there, it had a throttled engine's batch counted full."""
    return _tightest(b.max_concurrency, b.engine_capacity)


def _tightest(*limits: int | None) -> int | None:
    known = [c for c in limits if c is not None]
    return min(known) if known else None


def saturation(b: BackendSnapshot) -> str | None:
    """Why a request sent to `b` now would queue, or None when it has room (as far as anyone knows)."""
    limit = capacity(b)
    if limit is not None:
        return f"{b.inflight} in flight, capacity {limit}" if b.inflight >= limit else None
    if b.engine_waiting is not None and b.engine_waiting > 0 and b.inflight > 0:
        return f"{b.engine_waiting:g} waiting in the engine"
    return None


def spill(
    ranked: Sequence[str], backends: Mapping[str, BackendSnapshot]
) -> tuple[tuple[str, ...], Spill | None]:
    """The ranking with the backends that have room moved ahead of the saturated ones, and the spill
    made, if any. Nothing moves while the first backend has room: the request goes where it would."""
    order = tuple(ranked)
    why = saturation(backends[order[0]]) if order else None
    if why is None:
        return order, None
    full = {name for name in order if saturation(backends[name]) is not None}
    room = [name for name in order if name not in full]
    if not room:
        return _shortest_queue_first(order, backends, why)
    return (*room, *(name for name in order if name in full)), Spill(order[0], room[0], why)


def queue_ratio(b: BackendSnapshot) -> float:
    """Requests waiting per request running on a saturated backend. Running is its capacity where known,
    else what the gateway has in flight there less what the engine says waits (at least one)."""
    waiting = b.engine_waiting or 0.0
    limit = capacity(b)
    running = limit if limit is not None else max(b.inflight - waiting, 1.0)
    queued = max(b.inflight - running, waiting, 0.0)
    return queued / max(running, 1.0)


def _shortest_queue_first(
    order: tuple[str, ...], backends: Mapping[str, BackendSnapshot], why: str
) -> tuple[tuple[str, ...], Spill | None]:
    """Every backend saturated: the ranking sorted by queue ratio (stable, so ties keep their rank)."""
    balanced = tuple(sorted(order, key=lambda name: queue_ratio(backends[name])))
    if balanced[0] == order[0]:
        return order, None
    first, chosen = backends[order[0]], backends[balanced[0]]
    queues = f"queue {queue_ratio(first):.2g} vs {queue_ratio(chosen):.2g} per slot"
    detail = f"{why}; every backend saturated, {queues}"
    return balanced, Spill(order[0], balanced[0], detail)
