"""What one backend looks like to the router at decision time."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BackendSnapshot:
    """One backend as the router sees it at decision time."""

    name: str
    ready: bool = True
    starting: bool = False  # warming up (connection refused / 503 loading): not dead
    breaker_open: bool = False
    # Its engine made no progress (no token to any request, its counters still) for longer than the work
    # in flight allows (proxy/stall.py): out for now, like an open breaker, until it makes progress again.
    stalled: bool = False
    inflight: int = 0  # counted from the moment of dispatch, streams and retries included
    max_concurrency: int | None = None
    context_length: int | None = None  # None: unknown, assume it fits
    modalities: frozenset[str] = frozenset({"text"})
    tags: frozenset[str] = frozenset()
    # The endpoints it serves (records/endpoints.py names), natively or translated; None: every one.
    endpoints: frozenset[str] | None = None
    # Overload, from the engine's side: requests waiting inside it by its latest fresh report (None:
    # unknown or stale), and how many sequences it runs at once where it says (SGLang
    # max_running_requests, llama.cpp total_slots; vLLM does not tell its max_num_seqs).
    engine_waiting: float | None = None
    engine_capacity: int | None = None
    # What the engine ran when last seen with a persisting queue (backends/scraper.py `running_limit`):
    # its limit in practice, learned where it does not say it (vLLM). Read by the overload spill only.
    engine_full_at: int | None = None
    # Why it is down, as the prober last said (e.g. "unreachable: nothing listens at 10.0.0.5:8000 ..."),
    # so a refusal can tell the client; empty while it is ready or warming.
    problem: str = ""
