"""How many client connections the gateway holds, and the file-descriptor limit they live under.

Every connection is a file descriptor. With the soft limit at 1,024 (a common default), 1,100 idle
connections used to exhaust it: `accept()` failed, the event loop paused accepting, and every new client
was reset for as long as the idle ones were held, with no log line. So:

- at start, `raise_fd_limit` lifts the soft limit to the hard one (logged);
- `ConnectionCap` holds client connections under a cap below that limit (`limits.max_client_connections`,
  by default what the limit leaves after the upstream pool and a reserve). A connection that would pass
  the cap makes room by closing the connection idle the longest (no request in progress: a keep-alive
  between requests, or one that never sent a byte), as nginx reuses its idle keep-alive connections;
  only when every connection is serving a request is the newcomer answered 503 `too_many_connections`.
  Both are counted (`gateway_client_connections_*`) and logged, at most one line a second.
"""

from __future__ import annotations

import logging
import resource
import time
from collections.abc import Collection, Iterable, Iterator
from typing import Protocol, runtime_checkable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger("gateway.connections")

_RESERVE = 64  # descriptors kept for logs, the state files, engine probes and the listening socket
_LOG_EVERY_S = 1.0


@runtime_checkable
class Connection(Protocol):
    """What the cap reads of a client connection (api/http_protocol.py)."""

    last_active: float

    def is_idle(self) -> bool: ...

    def close(self) -> None: ...


def raise_fd_limit() -> int:
    """Lift the soft limit on open files to the hard one; the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("open files: the soft limit stays at %d (%s)", soft, exc)
            return soft
        log.info("open files: soft limit raised from %d to %d", soft, target)
        return target
    return soft


def default_cap(fd_limit: int, upstream_connections: int) -> int:
    """Client connections the descriptors allow: what the upstream pool and a reserve leave."""
    upstream = min(upstream_connections, fd_limit // 2)
    return max(16, fd_limit - upstream - _RESERVE)


class ConnectionCap:
    """At most `limit` client connections; see the module docstring."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.evicted = 0  # idle connections closed to make room
        self.refused = 0  # newcomers answered 503: every connection was busy
        self._logged_at = 0.0
        self._unlogged = 0

    def admit(self, connections: Collection[object], newcomer: object) -> bool:
        """Room for `newcomer` among `connections` (it included): True, having closed the longest-idle
        other connection when past the cap; False when every other one is serving a request. Only a
        connection past the cap looks at the others."""
        self.open = len(connections)
        if self.open <= self.limit:
            return True
        idlest = _idlest(connections, newcomer)
        if idlest is not None:
            idlest.close()
            self.evicted += 1
            self._log("closed an idle connection to make room")
            return True
        self.refused += 1
        self._log("every connection is serving a request: a new one was answered 503")
        return False

    def _log(self, what: str) -> None:
        self._unlogged += 1
        now = time.monotonic()
        if now - self._logged_at >= _LOG_EVERY_S:
            log.warning(
                "client connections at the cap of %d: %s (%d such since the last line; %d evicted, "
                "%d refused in all)",
                self.limit,
                what,
                self._unlogged,
                self.evicted,
                self.refused,
            )
            self._logged_at, self._unlogged = now, 0


def _idlest(connections: Iterable[object], newcomer: object) -> Connection | None:
    """The connection idle the longest, other than `newcomer`; None if all are serving a request. Only the
    gateway's own protocol can say it is idle (an upgraded connection cannot)."""
    idlest: Connection | None = None
    for connection in connections:
        if connection is newcomer or not isinstance(connection, Connection) or not connection.is_idle():
            continue
        if idlest is None or connection.last_active < idlest.last_active:
            idlest = connection
    return idlest


class ConnectionCollector(Collector):
    """The cap's counts for Prometheus."""

    def __init__(self, cap: ConnectionCap) -> None:
        self.cap = cap

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("gateway_client_connections", "Open client connections", value=self.cap.open)
        yield GaugeMetricFamily(
            "gateway_client_connections_limit", "The cap on client connections", value=self.cap.limit
        )
        yield CounterMetricFamily(
            "gateway_client_connections_evicted",
            "Idle client connections closed to make room for a new one at the cap",
            value=self.cap.evicted,
        )
        yield CounterMetricFamily(
            "gateway_client_connections_refused",
            "New client connections answered 503 at the cap, every connection busy",
            value=self.cap.refused,
        )
