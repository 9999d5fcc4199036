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
    inflight: int = 0  # counted from the moment of dispatch, streams and retries included
    max_concurrency: int | None = None
    context_length: int | None = None  # None: unknown, assume it fits
    modalities: frozenset[str] = frozenset({"text"})
    tags: frozenset[str] = frozenset()
