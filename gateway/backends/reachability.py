"""Whether a failed connection proves that nothing listens at a backend's URL, and how to say where.

A refused connection (nothing bound to the port) or a host name that does not resolve is an answer of
sorts: the machine, or the resolver, says no engine is there. An engine loading its model refuses too
(vLLM opens its port only once loaded), so one refusal proves little; refusals that go on past the
backend's warm-up bound (learned, configured or its flavor's, backends/warmup.py) say the URL is wrong
or the engine is not running: the prober calls the backend unreachable. Resets and other errors prove
nothing of the kind (a process is there).
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

REFUSED = "connection refused"
UNRESOLVED = "host name not found"


def nothing_listens(exc: BaseException) -> str | None:
    """REFUSED or UNRESOLVED when `exc` (a failed GET's exception, or its cause) proves no engine is
    at the address; None for any other failure."""
    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and id(found) not in seen:
        seen.add(id(found))
        if isinstance(found, ConnectionRefusedError):
            return REFUSED
        if isinstance(found, socket.gaierror):
            return UNRESOLVED
        # aiohttp keeps the OS error as `os_error`, urllib's URLError as `reason`.
        inner = getattr(found, "os_error", None) or getattr(found, "reason", None)
        found = inner if isinstance(inner, BaseException) else found.__cause__
    return None


def host_port(url: str) -> str:
    """`host:port` of a backend URL, credentials left out, the scheme's port when it names none."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return f"{parts.hostname or '?'}:{port}"
