"""How the prober and the scraper read an engine: one GET through the gateway's transport seam.

`Fetch(url, headers, timeout_s) -> (status, body)` is a plain GET with its headers, bounded as a whole
(connect, headers and body) by `timeout_s`. The composition root builds it from the upstream transport
(gateway/proxy/upstream.py, `UpstreamTransport.get`), so backends never import the proxy layer above
them, and tests pass a plain coroutine. Any status is an answer; failures are builtin exceptions, so the
callers can judge them without knowing the transport:

- TimeoutError: no complete answer within `timeout_s` (a slow or hung engine);
- any other OSError (ConnectionError for a refused, reset or broken connection): no answer at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

Fetch = Callable[[str, Mapping[str, str], float], Awaitable[tuple[int, bytes]]]
