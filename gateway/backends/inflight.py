"""The one in-flight count per backend: requests dispatched to it and not yet answered to the last byte.

The registry owns the instance (`Registry.inflight`); everything that needs a backend's load reads it
here: the router's snapshots and Prometheus through the registry, admission for its concurrency limits
(a slot *is* one count), dispatch accounting for the load at dispatch and the device-sharing clock.

A request is counted from the moment it is given a backend (its admission slot, or dispatch itself
when there is no admission) until its answer ends, streams and failover attempts included (each attempt
counts on its own backend). Whoever hands a slot directly to the next request leaves the count as it is,
so it never drops and rises again between the two. Zero counts are dropped: memory follows the backends
that are busy, never the traffic.
"""

from __future__ import annotations

from collections.abc import Callable


class InFlight:
    """Requests in flight per backend name. Watchers are called just before any count changes, so a
    clock that integrates over the counts (dispatch accounting's device time) closes the interval that
    the old counts held."""

    __slots__ = ("_counts", "watchers")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self.watchers: list[Callable[[], None]] = []

    def __getitem__(self, backend: str) -> int:
        return self._counts.get(backend, 0)

    def add(self, backend: str) -> None:
        self._changing()
        self._counts[backend] = self._counts.get(backend, 0) + 1

    def remove(self, backend: str) -> None:
        count = self._counts.get(backend, 0)
        if count <= 0:
            raise ValueError(f"no request in flight on {backend!r} to remove")
        self._changing()
        if count == 1:
            del self._counts[backend]
        else:
            self._counts[backend] = count - 1

    def hold(self, backend: str) -> Hold:
        """Count one request on `backend` until the hold is released (for dispatch without admission)."""
        self.add(backend)
        return Hold(self, backend)

    def busy(self) -> dict[str, int]:
        """The backends with requests in flight and their counts (a copy)."""
        return dict(self._counts)

    def _changing(self) -> None:
        for watcher in self.watchers:
            watcher()


class Hold:
    """One count on `backend`, given back by `release()` exactly once (later calls do nothing), like an
    admission slot."""

    __slots__ = ("backend", "_counts", "_released")

    def __init__(self, counts: InFlight, backend: str) -> None:
        self.backend = backend
        self._counts = counts
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._counts.remove(self.backend)
